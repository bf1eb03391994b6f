/**
 * The database: one @effect/sql-pg client, on DATABASE_URL when set, else on the embedded
 * PGlite. Migrations run when the layer is built, so the app only starts on a migrated schema.
 */
import { BunContext } from "@effect/platform-bun"
import { SqlClient, type Statement } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Context, Duration, Effect, FiberRef, Layer, Option, ParseResult, Redacted, Stream } from "effect"
import { fileURLToPath } from "node:url"
import Pg from "pg"
import { ServerConfig } from "./Config.js"
import { embeddedPool } from "./EmbeddedDb.js"

/** How the database is reached; background work polls instead of LISTEN in embedded mode. */
export class DatabaseMode extends Context.Tag("hookline/DatabaseMode")<DatabaseMode, {
  readonly embedded: boolean
  readonly dataDir: string
}>() {}

// int8 and numeric come back from pg as strings; Hookline's amounts fit in a double.
const INT8_OID = 20
const NUMERIC_OID = 1700
const types: Pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === INT8_OID || oid === NUMERIC_OID
      ? (value: string) => Number(value)
      : Pg.types.getTypeParser(oid, format ?? "text")) as Pg.CustomTypesConfig["getTypeParser"]
}

/** The pg pool under the client, for its usage metrics (total, idle and waiting connections). */
export class DbPool extends Context.Tag("hookline/DbPool")<DbPool, Pg.Pool>() {}

/** A pool on DATABASE_URL, checked with one query at start (as PgClient.layer does). */
const networkPool = (url: Redacted.Redacted, max: number, statementTimeout: Duration.Duration) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const pool = new Pg.Pool({
        connectionString: Redacted.value(url),
        max,
        types,
        application_name: "hookline",
        // Sent as a startup parameter: every session starts with it, no extra round trip.
        statement_timeout: Math.round(Duration.toMillis(statementTimeout))
      })
      // An idle connection's error (server restart): the pool drops it and reconnects on demand.
      pool.on("error", () => {})
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.timeoutOption(1000))
  ).pipe(
    Effect.tap((pool) =>
      Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(
        Effect.timeoutFail({
          duration: Duration.seconds(5),
          onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
        })
      )
    )
  )

const ClientLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const mode = Layer.succeed(DatabaseMode, {
      embedded: Option.isNone(config.databaseUrl),
      dataDir: config.dataDir
    })
    const pool = Layer.scoped(
      DbPool,
      Option.match(config.databaseUrl, {
        onNone: () =>
          embeddedPool(config.dataDir, types).pipe(
            Effect.catchTag("DataDirLocked", (locked) => new SqlError({ cause: locked, message: locked.message }))
          ),
        onSome: (url) => networkPool(url, config.pgMaxConnections, config.dbStatementTimeout)
      })
    )
    const client = Layer.unwrapEffect(
      Effect.map(DbPool, (built) => PgClient.layerFromPool({ acquire: Effect.succeed(built), types }))
    )
    return Layer.merge(client.pipe(Layer.provideMerge(pool)), mode)
  })
)

export const migrationsDirectory = fileURLToPath(new URL("../migrations", import.meta.url))

/**
 * Lifts DB_STATEMENT_TIMEOUT for the rest of the current transaction: for work that is long by
 * nature and not a tenant's to trigger (the admin import).
 */
export const withoutStatementTimeout = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SET LOCAL statement_timeout = 0`)

const migrate = PgMigrator.run({ loader: PgMigrator.fromFileSystem(migrationsDirectory) })

/**
 * Migrations run on a connection of their own without DB_STATEMENT_TIMEOUT (an index build on a
 * large catalog takes minutes, and a second process waits on the first one's migration lock),
 * closed once they are done. The embedded database has one connection and no timeout.
 */
const MigratorLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    yield* Option.match(config.databaseUrl, {
      onNone: () => migrate,
      onSome: (url) =>
        migrate.pipe(
          Effect.provide(PgClient.layerFromPool({ acquire: networkPool(url, 1, Duration.zero), types })),
          Effect.scoped
        )
    })
  })
).pipe(Layer.provide(BunContext.layer))

/** SqlClient + PgClient + DbPool + DatabaseMode, on a migrated schema. */
export const SqlLive = MigratorLive.pipe(Layer.provideMerge(ClientLive))

/**
 * Database and row-decoding failures are defects to the API: they never appear in a handler's
 * error type, become a logged 500, and roll back any transaction they happen in.
 */
export const orDieOnDb = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError | ParseResult.ParseError>, R> =>
  Effect.catchAll(effect, (error) =>
    error instanceof SqlError || ParseResult.isParseError(error)
      ? Effect.die(error)
      : Effect.fail(error as Exclude<E, SqlError | ParseResult.ParseError>))

/** A time limit for one statement: past it the query is cancelled on the server and `onTimeout` is the failure. */
export interface Deadline<E> {
  readonly duration: Duration.Duration
  readonly onTimeout: () => E
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

/** One statement straight on a pooled connection; past `deadline` it is cancelled on the server. */
const direct = <A extends object, E>(
  pool: Pg.Pool,
  text: string,
  params: ReadonlyArray<unknown>,
  deadline: Deadline<E> | undefined,
  retryStrayCancel = true
): Effect.Effect<ReadonlyArray<A>, SqlError | E> =>
  Effect.async<ReadonlyArray<A>, SqlError | E>((resume) => {
    let abandoned = false
    // The backend running the query, while it runs (pg's client has it at run time; its types do not say so).
    let backend: number | undefined
    // A cancel is a signal the backend may act on late, during the next query on its connection;
    // a connection that was sent one is therefore closed, never handed to another request.
    let cancelSent = false
    const cancel = () => {
      if (backend === undefined) return Promise.resolve()
      cancelSent = true
      return cancelBackend(pool, backend)
    }
    const timer = deadline === undefined ? undefined : setTimeout(() => {
      abandoned = true
      void cancel()
      resume(Effect.fail(deadline.onTimeout()))
    }, Duration.toMillis(deadline.duration))
    pool.connect((connectError, client, release) => {
      if (connectError !== undefined || client === undefined) {
        clearTimeout(timer)
        return abandoned ? undefined : resume(Effect.fail(new SqlError({ cause: connectError, message: "Failed to acquire connection" })))
      }
      if (abandoned) return release()
      backend = (client as Pg.PoolClient & { readonly processID?: number }).processID
      client.query<A>(text, params as Array<unknown>, (queryError, result) => {
        backend = undefined
        clearTimeout(timer)
        // A connection whose query failed for a reason other than SQL (a lost socket) is dropped, as is one sent a cancel.
        const broken = queryError instanceof Error && !("code" in queryError)
        release(broken ? queryError : cancelSent ? new Error("sent a cancel: closed rather than reused") : undefined)
        if (abandoned) return
        if (queryError === null || queryError === undefined) return resume(Effect.succeed(result.rows))
        // Cancelled by a request this statement never made: a late cancel meant for the
        // connection's previous query (sql-pg sends them too). The statement was rolled back;
        // it runs once more, on another connection.
        if (retryStrayCancel && isStrayCancel(queryError)) return resume(direct(pool, text, params, deadline, false))
        resume(Effect.fail(new SqlError({ cause: queryError, message: "Failed to execute statement" })))
      })
    })
    // Interrupted mid-query (a client gone): ask the server to stop it, as sql-pg does.
    return Effect.suspend(() => {
      abandoned = true
      clearTimeout(timer)
      return Effect.promise(cancel).pipe(Effect.timeoutOption(5000))
    })
  })

/**
 * Runs statements on the pool directly when the fiber is neither inside a transaction nor
 * tracing. @effect/sql wraps every statement in its own Scope and span, and `Effect.timeout`
 * forks a fiber per call; together they cost more CPU than the query itself (bench/README.md,
 * "Where a request's CPU goes"). The hot routes run one to three statements and no transaction.
 * Inside a transaction or a sampled trace the statement runs as usual, on the transaction's
 * connection and with its span; so does every statement when no DbPool is provided (a service
 * built on a bare PgClient layer, as some tests do).
 */
export const StatementRunner = Effect.map(Effect.serviceOption(DbPool), (pooled) => {
  const pool = Option.getOrUndefined(pooled)
  function run<A extends object>(statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError>
  function run<A extends object, E>(statement: Statement.Statement<A>, deadline: Deadline<E>): Effect.Effect<ReadonlyArray<A>, SqlError | E>
  function run<A extends object, E>(statement: Statement.Statement<A>, deadline?: Deadline<E>): Effect.Effect<ReadonlyArray<A>, SqlError | E> {
    return Effect.withFiberRuntime((fiber) => {
      if (pool === undefined || fiber.getFiberRef(FiberRef.currentTracerEnabled) || fiber.currentContext.unsafeMap.has(SqlClient.TransactionConnection.key)) {
        return deadline === undefined ? statement : Effect.timeoutFail(statement, deadline)
      }
      const [text, params] = statement.compile()
      return direct<A, E>(pool, text, params, deadline)
    })
  }
  return run
})

/**
 * LISTEN on `channel` over a connection of its own, as a stream of notification payloads; the
 * stream fails when that connection is lost (callers retry). Used instead of PgClient.listen,
 * whose shared listen connection (an RcRef) leaks when its subscriber is interrupted while the
 * connection is still opening: Effect 3.22's RcRef never closes the scope of an interrupted
 * acquisition, so a server stopped just after it started kept one connection open for good.
 * Here acquireRelease opens the connection uninterruptibly and always registers its end.
 */
export const listen = (channel: string): Stream.Stream<string, SqlError, DbPool> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const pool = yield* DbPool
    const client = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const connection = new Pg.Client(pool.options)
          // Errors are reported through the stream below; an unheard "error" event would crash.
          connection.on("error", () => {})
          try {
            await connection.connect()
            await connection.query(`LISTEN ${Pg.escapeIdentifier(channel)}`)
          } catch (cause) {
            await connection.end().catch(() => {})
            throw cause
          }
          return connection
        },
        catch: (cause) => new SqlError({ cause, message: `Failed to LISTEN on ${channel}` })
      }),
      (connection) => Effect.promise(() => connection.end().catch(() => {})).pipe(Effect.timeoutOption(1000))
    )
    return Stream.async<string, SqlError>((emit) => {
      client.on("notification", (message) => {
        if (message.channel === channel) void emit.single(message.payload ?? "")
      })
      client.on("error", (cause) => void emit.fail(new SqlError({ cause, message: `LISTEN connection on ${channel} failed` })))
      client.on("end", () => void emit.fail(new SqlError({ cause: null, message: `LISTEN connection on ${channel} closed` })))
    })
  }))
