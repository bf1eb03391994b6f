/**
 * StatementRunner (src/Sql.ts) on a real Postgres, no HTTP: statements outside transactions and
 * traces run straight on the pool, a deadline cancels the query on the server, an abandoned query
 * is cancelled only when it outlives DB_CANCEL_GRACE, a connection that was sent a cancel is
 * closed rather than reused, and a cancel the statement never asked for (a late one meant for the
 * connection's previous query) is survived by running it again.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Duration, Effect, Either, Exit, Fiber, identity, Layer, ManagedRuntime, Option } from "effect"
import type Pg from "pg"
import { CancelGrace, DbPool, PreparedStatements } from "../src/Sql.js"
import { prepared, StatementRunner } from "../src/StatementRunner.js"
import { createDatabase, dropDatabase, testPool } from "./support/server.js"

class TookTooLong {
  readonly _tag = "TookTooLong"
}

let databaseUrl: string
// One connection: every statement of a test runs on the same backend unless that one is closed.
let pool: Pg.Pool
let observer: Pg.Pool
const makeRuntime = (on: Pg.Pool) =>
  ManagedRuntime.make(PgClient.layerFromPool({ acquire: Effect.succeed(on) }).pipe(Layer.provideMerge(Layer.succeed(DbPool, on))))
let runtime: ReturnType<typeof makeRuntime>

beforeAll(async () => {
  databaseUrl = await createDatabase()
  pool = testPool(databaseUrl, 1)
  observer = testPool(databaseUrl, 1)
  runtime = makeRuntime(pool)
})

afterAll(async () => {
  await runtime.dispose()
  await pool.end()
  await observer.end()
  await dropDatabase(databaseUrl)
})

/** Runs `use` with the runner and the SQL client, untraced (as an unsampled request). */
const withRunner = <A, E>(
  use: (run: Effect.Effect.Success<typeof StatementRunner>, sql: SqlClient.SqlClient) => Effect.Effect<A, E>,
  cancelGrace?: Duration.Duration
) =>
  runtime.runPromiseExit(
    Effect.gen(function*() {
      const run = yield* StatementRunner
      const sql = yield* SqlClient.SqlClient
      return yield* use(run, sql)
    }).pipe(
      cancelGrace === undefined ? identity : Effect.provideService(CancelGrace, cancelGrace),
      Effect.withTracerEnabled(false)
    )
  )

const backendPid = (run: Effect.Effect.Success<typeof StatementRunner>, sql: SqlClient.SqlClient) =>
  Effect.map(run(sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`), (rows) => rows[0].pid)

describe("StatementRunner", () => {
  test("answers rows like the statement itself", async () => {
    const exit = await withRunner((run, sql) => run(sql<{ n: number }>`SELECT n FROM generate_series(1, 3) n`))
    expect(exit).toEqual(Exit.succeed([{ n: 1 }, { n: 2 }, { n: 3 }]))
  })

  test("past its deadline the query is cancelled on the server, the caller gets the deadline's failure, the connection is replaced", async () => {
    const exit = await withRunner((run, sql) =>
      Effect.gen(function*() {
        const before = yield* backendPid(run, sql)
        const started = Date.now()
        const outcome = yield* Effect.either(run(sql`SELECT pg_sleep(5)`, { duration: Duration.millis(200), onTimeout: () => new TookTooLong() }))
        const waited = Date.now() - started
        const after = yield* backendPid(run, sql)
        return { outcome, waited, replaced: after !== before }
      }))
    if (Exit.isFailure(exit)) throw new Error("the runner failed")
    expect(Either.getLeft(exit.value.outcome)).toEqual(Option.some(new TookTooLong()))
    expect(exit.value.waited).toBeLessThan(4_000)
    expect(exit.value.replaced).toBe(true)
    const sleeping = await observer.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(5)%' AND state = 'active'")
    expect(sleeping.rows[0].n).toBe(0)
  })

  /**
   * Interrupts `seconds` of pg_sleep 0.1 s after it started, under `cancelGrace`: the backend before
   * and after, and how long the interruption took.
   */
  const interruptSleep = async (seconds: number, cancelGrace: Duration.Duration) => {
    const exit = await withRunner((run, sql) =>
      Effect.gen(function*() {
        const before = yield* backendPid(run, sql)
        const sleeping = yield* Effect.fork(run(sql`SELECT pg_sleep(${seconds})`))
        yield* Effect.sleep(Duration.millis(100))
        const started = Date.now()
        yield* Fiber.interrupt(sleeping)
        const waited = Date.now() - started
        return { before, after: yield* backendPid(run, sql), waited }
      }), cancelGrace)
    if (Exit.isFailure(exit)) throw new Error("the runner failed")
    return exit.value
  }

  test("an interrupted query still running past DB_CANCEL_GRACE is cancelled and its connection is not handed to the next statement", async () => {
    const { after, before, waited } = await interruptSleep(5, Duration.millis(300))
    expect(waited).toBeGreaterThanOrEqual(250)
    expect(waited).toBeLessThan(4_000)
    expect(after).not.toBe(before)
    const sleeping = await observer.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(%' AND state = 'active'")
    expect(sleeping.rows[0].n).toBe(0)
  })

  test("an interrupted query that ends within DB_CANCEL_GRACE is left to end: no cancel, its connection stays in the pool", async () => {
    const { after, before, waited } = await interruptSleep(0.4, Duration.seconds(5))
    // The interruption waited for the statement to end (~0.3 s), not for the grace.
    expect(waited).toBeGreaterThanOrEqual(200)
    expect(waited).toBeLessThan(4_000)
    expect(after).toBe(before)
  })

  test("a cancel the statement never sent is survived: the statement runs again and answers", async () => {
    const exit = await withRunner((run, sql) =>
      Effect.gen(function*() {
        const pid = yield* backendPid(run, sql)
        // Someone else's late cancel lands on this backend while the statement runs.
        const stray = Effect.promise(() => observer.query("SELECT pg_cancel_backend($1)", [pid])).pipe(Effect.delay(Duration.millis(150)))
        const [rows] = yield* Effect.all([run(sql<{ answer: number }>`SELECT 42 AS answer FROM pg_sleep(0.5)`), stray], { concurrency: 2 })
        return rows
      }))
    expect(exit).toEqual(Exit.succeed([{ answer: 42 }]))
  })

  /** The statements the pool's one backend holds prepared (pg_prepared_statements is per session). */
  const preparedOnBackend = (run: Effect.Effect.Success<typeof StatementRunner>, sql: SqlClient.SqlClient) =>
    Effect.map(run(sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`), (rows) => rows.map((row) => row.statement))

  test("a statement marked prepared is prepared once on its connection and answers with each call's parameters", async () => {
    const lookup = (sql: SqlClient.SqlClient, n: number) => prepared(sql<{ doubled: number }>`SELECT ${n}::int * 2 AS doubled /* marked */`)
    const exit = await withRunner((run, sql) =>
      Effect.gen(function*() {
        const answers = yield* Effect.forEach([1, 2, 3], (n) => run(lookup(sql, n)))
        return { answers: answers.map((rows) => rows[0].doubled), held: yield* preparedOnBackend(run, sql) }
      }))
    expect(exit).toEqual(Exit.succeed({ answers: [2, 4, 6], held: [expect.stringContaining("/* marked */")] }))
  })

  test("with DB_PREPARED_STATEMENTS off, or unmarked, nothing is prepared", async () => {
    const exit = await withRunner((run, sql) =>
      Effect.gen(function*() {
        yield* run(sql`SELECT 1 AS one /* unmarked */`)
        const unmarked = yield* preparedOnBackend(run, sql)
        const off = yield* Effect.provideService(
          Effect.flatMap(StatementRunner, (offRun) =>
            Effect.zipRight(offRun(prepared(sql`SELECT 2 AS two /* flag off */`)), preparedOnBackend(offRun, sql))),
          PreparedStatements,
          false
        )
        return { unmarked, off }
      }))
    const held = Exit.map(exit, ({ off, unmarked }) => [...unmarked, ...off].filter((text) => /unmarked|flag off/.test(text)))
    expect(held).toEqual(Exit.succeed([]))
  })
})
