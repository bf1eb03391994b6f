/**
 * StatementRunner: statements on the pool directly, outside transactions and sampled traces,
 * with an optional deadline that cancels the query on the server.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, FiberRef, Option } from "effect"
import Pg from "pg"
import { CancelGrace, DbPool, PreparedStatements } from "./Sql.js"

/** A time limit for one statement: past it the query is cancelled on the server and `onTimeout` is the failure. */
export interface Deadline<E> {
  readonly duration: Duration.Duration
  readonly onTimeout: () => E
}

const marked = new WeakSet<Statement.Statement<object>>()

/**
 * Marks a statement whose plan does not depend on its parameters' values (a key lookup, one of
 * the Ledger's writes): on the direct path it is prepared once per connection under a name of
 * its own, so PostgreSQL parses and plans it once instead of on every call (the Ledger's reserve
 * and settle spent ~0.45 ms each in parse and bind). A catalog page's plan does depend on them
 * (a rare word or a common one), so pages are not marked.
 */
export const prepared = <A extends object>(statement: Statement.Statement<A>): Statement.Statement<A> => {
  marked.add(statement)
  return statement
}

/** One name per statement text, for the life of the process (each connection prepares it once). */
const statementNames = new Map<string, string>()
const statementName = (text: string) => {
  let name = statementNames.get(text)
  if (name === undefined) {
    name = `hookline_${statementNames.size + 1}`
    statementNames.set(text, name)
  }
  return name
}

/** Postgres's answer to pg_cancel_backend (57014 is also a statement_timeout, which is not stray). */
const isStrayCancel = (error: Error) =>
  "code" in error && error.code === "57014" && error.message.includes("user request")

/**
 * Sent on a connection of its own: the pool's may all be busy (one of them with the very query
 * to cancel), and a cancel that waits for a free one comes too late to help.
 */
const cancelBackend = async (pool: Pg.Pool, backend: number) => {
  const connection = new Pg.Client(pool.options)
  connection.on("error", () => {})
  try {
    await connection.connect()
    await connection.query("SELECT pg_cancel_backend($1)", [backend])
  } catch {
    // Best effort: the query then runs to its end, or to statement_timeout.
  } finally {
    await connection.end().catch(() => {})
  }
}

/**
 * Runs one statement straight on the pool. @effect/sql wraps every statement in its own Scope
 * and span, and `Effect.timeout` forks a fiber per call; together they cost more CPU than the
 * query itself (bench/README.md, "Where a request's CPU goes"), and the hot routes run one to
 * three statements and no transaction.
 *
 * Interrupted mid-query (the client hung up), a statement that ends within `cancelGraceMs` is left
 * to end, on a connection that stays in the pool; one still running then is cancelled on the
 * server, as sql-pg does. Cancelling at once cost every hung-up request two new backends (the
 * cancel's and the replacement's, ~25 ms of CPU each on the 2-core machine): when a load generator
 * stopped, PostgreSQL spent ~0.5 s starting them and every request stalled behind it.
 */
const runDirect = <A extends object, E>(
  pool: Pg.Pool,
  text: string,
  params: ReadonlyArray<unknown>,
  deadline: Deadline<E> | undefined,
  name: string | undefined,
  cancelGraceMs: number,
  retryStrayCancel = true
): Effect.Effect<ReadonlyArray<A>, SqlError | E> =>
  Effect.async<ReadonlyArray<A>, SqlError | E>((resume) => {
    let abandoned = false
    // The backend running the query, while it runs (pg's client has it at run time; its types do not say so).
    let backend: number | undefined
    // A cancel is a signal the backend may act on late, during the next query on its connection;
    // a connection that was sent one is therefore closed, never handed to another request.
    let cancelSent = false
    // Set while an abandoned request waits for its statement to end within the grace.
    let onEnded: (() => void) | undefined
    const cancel = () => {
      if (backend === undefined) return Promise.resolve()
      cancelSent = true
      return cancelBackend(pool, backend)
    }
    // Past the deadline the query is cancelled, and the caller answered once it has stopped (or a
    // second later, should the cancel not take): a timeout's answer means the work is over.
    let deadlinePassed = false
    let timeoutAnswered = false
    const answerTimedOut = () => {
      if (deadline === undefined || timeoutAnswered) return
      timeoutAnswered = true
      resume(Effect.fail(deadline.onTimeout()))
    }
    const timer = deadline === undefined ? undefined : setTimeout(() => {
      abandoned = true
      deadlinePassed = true
      if (backend === undefined) return answerTimedOut()
      void cancel()
      setTimeout(answerTimedOut, 1000)
    }, Duration.toMillis(deadline.duration))
    pool.connect((connectError, client, release) => {
      if (connectError !== undefined || client === undefined) {
        clearTimeout(timer)
        return abandoned ? undefined : resume(Effect.fail(new SqlError({ cause: connectError, message: "Failed to acquire connection" })))
      }
      if (abandoned) return release()
      backend = (client as Pg.PoolClient & { readonly processID?: number }).processID
      client.query<A>({ text, values: params as Array<unknown>, ...(name === undefined ? {} : { name }) }, (queryError, result) => {
        backend = undefined
        clearTimeout(timer)
        // A connection whose query failed for a reason other than SQL (a lost socket) is dropped, as is one sent a cancel.
        const broken = queryError instanceof Error && !("code" in queryError)
        release(broken ? queryError : cancelSent ? new Error("sent a cancel: closed rather than reused") : undefined)
        onEnded?.()
        if (abandoned) return deadlinePassed ? answerTimedOut() : undefined
        if (queryError === null || queryError === undefined) return resume(Effect.succeed(result.rows))
        // Cancelled by a request this statement never made: a late cancel meant for the
        // connection's previous query (sql-pg sends them too). The statement was rolled back;
        // it runs once more, on another connection.
        if (retryStrayCancel && isStrayCancel(queryError)) return resume(runDirect(pool, text, params, deadline, name, cancelGraceMs, false))
        resume(Effect.fail(new SqlError({ cause: queryError, message: "Failed to execute statement" })))
      })
    })
    // Interrupted mid-query (the client hung up): wait for the end within the grace, then cancel.
    return Effect.suspend(() => {
      abandoned = true
      clearTimeout(timer)
      if (backend === undefined || cancelSent) return Effect.void
      return Effect.async<void>((resumeInterruption) => {
        const grace = setTimeout(() => {
          onEnded = undefined
          resumeInterruption(Effect.promise(cancel).pipe(Effect.timeoutOption(5000), Effect.asVoid))
        }, cancelGraceMs)
        onEnded = () => {
          clearTimeout(grace)
          resumeInterruption(Effect.void)
        }
      })
    })
  })

/**
 * Runs statements on the pool directly when the fiber is neither inside a transaction nor
 * tracing (see runDirect); otherwise, and when no DbPool is provided (a service built on a bare
 * PgClient layer, as some tests do), as the statement itself.
 */
export const StatementRunner = Effect.gen(function*() {
  const pool = Option.getOrUndefined(yield* Effect.serviceOption(DbPool))
  const prepare = yield* PreparedStatements
  const cancelGraceMs = Duration.toMillis(yield* CancelGrace)
  function run<A extends object>(statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError>
  function run<A extends object, E>(statement: Statement.Statement<A>, deadline: Deadline<E>): Effect.Effect<ReadonlyArray<A>, SqlError | E>
  function run<A extends object, E>(statement: Statement.Statement<A>, deadline?: Deadline<E>): Effect.Effect<ReadonlyArray<A>, SqlError | E> {
    return Effect.withFiberRuntime((fiber) => {
      if (pool === undefined || fiber.getFiberRef(FiberRef.currentTracerEnabled) || fiber.currentContext.unsafeMap.has(SqlClient.TransactionConnection.key)) {
        return deadline === undefined ? statement : Effect.timeoutFail(statement, deadline)
      }
      const [text, params] = statement.compile()
      return runDirect<A, E>(pool, text, params, deadline, prepare && marked.has(statement) ? statementName(text) : undefined, cancelGraceMs)
    })
  }
  return run
})
