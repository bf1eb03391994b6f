/**
 * The database layer (src/Sql.ts) on a real PostgreSQL, no HTTP: what Hookline relies on from
 * @effect/sql-pg's own driver. On a connection of its own (`onOwnConnection`, a transaction) a
 * statement past its deadline is cancelled on the server, and so is an interrupted one; on the
 * shared, pipelined connections an interrupted statement is left to finish and the connection kept
 * (a client that hangs up is given DB_CANCEL_GRACE first: test/hang-up.test.ts);
 * statements are held prepared on their connection unless DB_PREPARED_STATEMENTS is off;
 * DB_STATEMENT_TIMEOUT is a session setting; int8 and numeric come back as numbers; a LISTEN
 * stream interrupted while it opens leaks no connection; migration scripts are cut into statements.
 * Nothing here asserts on elapsed time: waits are on conditions, with a bound.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Duration, Effect, Exit, Fiber, Layer, ManagedRuntime, Option, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { randomBytes } from "node:crypto"
import Pg from "pg"
import { splitStatements } from "../migrations/statements.js"
import { listen, onOwnConnection, SqlLive } from "../src/Sql.js"

const adminUrl = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const databaseName = `hookline_test_${randomBytes(6).toString("hex")}`
const databaseUrl = Object.assign(new URL(adminUrl), { pathname: `/${databaseName}` }).toString()

const admin = async <A>(use: (client: Pg.Client) => Promise<A>) => {
  const client = new Pg.Client({ connectionString: adminUrl })
  await client.connect()
  try {
    return await use(client)
  } finally {
    await client.end()
  }
}

/** The server's database layer as the app builds it, from these settings (one connection unless said). */
const runtimeWith = (settings: Record<string, string>) =>
  ManagedRuntime.make(SqlLive.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({
    env: { DATABASE_URL: databaseUrl, PG_MAX_CONNECTIONS: "1", ...settings }
  })))))

let observer: Pg.Client
let runtime: ReturnType<typeof runtimeWith>

beforeAll(async () => {
  await admin((client) => client.query(`CREATE DATABASE ${databaseName}`))
  observer = new Pg.Client({ connectionString: databaseUrl })
  await observer.connect()
  runtime = runtimeWith({ DB_STATEMENT_TIMEOUT: "7 seconds" })
  await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE marks (n int)`))
})

afterAll(async () => {
  await runtime.dispose()
  await observer.end()
  await admin((client) => client.query(`DROP DATABASE ${databaseName} WITH (FORCE)`))
})

/** Polls `check` until it holds, for at most `bound`; answers whether it did. */
const eventually = async (check: () => Promise<boolean>, bound = Duration.seconds(10)) => {
  const until = Date.now() + Duration.toMillis(bound)
  while (Date.now() < until) {
    if (await check()) return true
    await Bun.sleep(20)
  }
  return check()
}

const running = async (pattern: string) =>
  (await observer.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
    [pattern]
  )).rows[0].n

const marks = async () => (await observer.query<{ n: number }>("SELECT n FROM marks ORDER BY n")).rows.map((row) => row.n)

const backendPid = Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`)

/**
 * Forks `statement` (run by `run`, on the shared connections by default), waits until PostgreSQL
 * runs it, then interrupts it; answers whether it was seen running.
 */
const interruptOnceRunning = (
  on: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient, unknown>,
  statement: string,
  run: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown> = (sql) => sql.unsafe(statement)
) =>
  on.runPromise(Effect.gen(function*() {
    const fiber = yield* Effect.forkChild(run(yield* SqlClient.SqlClient))
    const started = yield* Effect.promise(() => eventually(async () => (await running(statement)) === 1))
    yield* Fiber.interrupt(fiber)
    return started
  }))

describe("the session", () => {
  test("int8 and numeric come back as numbers, arrays of them too", async () => {
    const rows = await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql`SELECT 9007199254740991::int8 AS big, 12.75::numeric AS amount, ARRAY[1, 2]::int8[] AS list, ${5}::bigint AS bound`))
    expect(rows).toEqual([{ big: 9007199254740991, amount: 12.75, list: [1, 2], bound: 5 }])
  })

  test("DB_STATEMENT_TIMEOUT is the session's statement_timeout; the migrations were applied", async () => {
    const rows = await runtime.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ timeout: string; migrations: number }>`SELECT current_setting('statement_timeout') AS timeout,
        (SELECT count(*) FROM effect_sql_migrations)::int AS migrations`))
    expect(rows[0].timeout).toBe("7s")
    expect(rows[0].migrations).toBeGreaterThan(0)
  })
})

describe("deadlines and interruptions", () => {
  test("past its deadline a statement on its own connection is cancelled on the server, the caller gets the deadline's failure, the connection is kept", async () => {
    const exit = await runtime.runPromiseExit(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const before = yield* backendPid
      const outcome = yield* Effect.exit(onOwnConnection(sql, sql`INSERT INTO marks SELECT 1 FROM pg_sleep(5)`).pipe(
        Effect.timeoutOrElse({ duration: Duration.millis(200), orElse: () => Effect.fail("took too long" as const) })
      ))
      return { outcome, same: (yield* backendPid)[0].pid === before[0].pid }
    }))
    if (Exit.isFailure(exit)) throw new Error("the statement failed otherwise")
    expect(exit.value.outcome).toEqual(Exit.fail("took too long"))
    // The caller was answered once the statement had stopped: nothing runs it, nothing was written.
    expect(await running("INSERT INTO marks SELECT 1 FROM pg_sleep%")).toBe(0)
    expect(await marks()).toEqual([])
    // PostgreSQL confirmed the cancel (57014), so the connection was not retired.
    expect(exit.value.same).toBe(true)
  })

  test("an interrupted statement on its own connection is cancelled on the server, and its caller answered once it has stopped", async () => {
    const statement = "INSERT INTO marks SELECT 3 FROM pg_sleep(30)"
    expect(await interruptOnceRunning(runtime, statement, (sql) => onOwnConnection(sql, sql.unsafe(statement)))).toBe(true)
    expect(await running(statement)).toBe(0)
    expect(await marks()).toEqual([])
  })

  test("an interrupted statement on a shared connection is left to finish: its caller is answered at once, the connection kept", async () => {
    const statement = "INSERT INTO marks VALUES (4)"
    // The statement waits on a lock another session holds, so it is surely still running when interrupted.
    const locker = new Pg.Client({ connectionString: databaseUrl })
    await locker.connect()
    try {
      await locker.query("BEGIN")
      await locker.query("LOCK TABLE marks IN ACCESS EXCLUSIVE MODE")
      const result = await runtime.runPromise(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const before = yield* backendPid
        const fiber = yield* Effect.forkChild(sql.unsafe(statement))
        yield* Effect.promise(() => eventually(async () => (await running(statement)) === 1))
        yield* Fiber.interrupt(fiber)
        const stillRunning = yield* Effect.promise(() => running(statement))
        yield* Effect.promise(() => locker.query("COMMIT"))
        return { stillRunning, same: (yield* backendPid)[0].pid === before[0].pid }
      }))
      // Answered while PostgreSQL still ran it; the next statement waited for it on the same backend.
      expect(result).toEqual({ stillRunning: 1, same: true })
      expect(await marks()).toEqual([4])
    } finally {
      await locker.end()
      await observer.query("DELETE FROM marks")
    }
  })
})

describe("DB_PIPELINE=false", () => {
  test("every statement has a connection of its own: an interrupted one is cancelled on the server", async () => {
    const unpipelined = runtimeWith({ DB_PIPELINE: "false" })
    const statement = "INSERT INTO marks SELECT 5 FROM pg_sleep(30)"
    try {
      expect(await interruptOnceRunning(unpipelined, statement)).toBe(true)
      expect(await running(statement)).toBe(0)
      expect(await marks()).toEqual([])
    } finally {
      await unpipelined.dispose()
    }
  })
})

describe("prepared statements", () => {
  /** The statements this connection's backend holds prepared (pg_prepared_statements is per session). */
  const preparedHere = (sql: SqlClient.SqlClient) =>
    Effect.map(sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`, (rows) => rows.map((row) => row.statement))

  const lookups = (tag: string) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const answers = yield* Effect.forEach([1, 2, 3], (n) => sql.unsafe<{ doubled: number }>(`SELECT $1::int * 2 AS doubled /* ${tag} */`, [n]))
      return { answers: answers.map((rows) => rows[0].doubled), held: (yield* preparedHere(sql)).filter((text) => text.includes(tag)) }
    })

  test("are prepared once on their connection and answer with each call's parameters", async () => {
    expect(await runtime.runPromise(lookups("default"))).toEqual({ answers: [2, 4, 6], held: [expect.stringContaining("/* default */")] })
  })

  test("with DB_PREPARED_STATEMENTS=false nothing is held prepared", async () => {
    const unprepared = runtimeWith({ DB_PREPARED_STATEMENTS: "false" })
    try {
      expect(await unprepared.runPromise(lookups("flag off"))).toEqual({ answers: [2, 4, 6], held: [] })
    } finally {
      await unprepared.dispose()
    }
  })
})

describe("listen", () => {
  test("streams the payloads on a connection outside the pool; interrupted while it opens, it leaks none", async () => {
    // One pool connection: the notifications below are sent on it while the listener holds its own.
    const listener = runtimeWith({})
    // Backends by pid: one an earlier test closed may still be leaving, so a count could fall short.
    const connections = async () =>
      (await observer.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'hookline'"
      )).rows.map((row) => row.pid)
    const before = new Set(await connections())
    const opened = async () => (await connections()).filter((pid) => !before.has(pid))
    try {
      const received = await listener.runPromise(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const fiber = yield* Effect.forkChild(Stream.runCollect(Stream.take(listen("sql_driver_test"), 2)))
        // Notify until the listener has registered and heard both.
        const notifying = yield* Effect.forkChild(Effect.forever(
          Effect.andThen(sql`SELECT pg_notify('sql_driver_test', 'ping')`, Effect.sleep(Duration.millis(20)))
        ))
        const payloads = yield* Fiber.join(fiber).pipe(Effect.timeout(Duration.seconds(10)))
        yield* Fiber.interrupt(notifying)
        return payloads
      }))
      expect(received).toEqual(["ping", "ping"])
      // Opened and interrupted at every point of its opening: the connections stay usable.
      const afterwards = await listener.runPromise(Effect.gen(function*() {
        for (let attempt = 0; attempt < 40; attempt++) {
          const fiber = yield* Effect.forkChild(Stream.runDrain(listen("sql_driver_test")))
          yield* Effect.sleep(Duration.millis(attempt % 8))
          yield* Fiber.interrupt(fiber)
        }
        const sql = yield* SqlClient.SqlClient
        yield* Effect.all([sql`SELECT pg_sleep(0.05)`, sql`SELECT pg_sleep(0.05)`], { concurrency: 2 }).pipe(Effect.timeout(Duration.seconds(10)))
        const heard = yield* Effect.forkChild(Stream.runHead(listen("sql_driver_test")))
        yield* Effect.andThen(Effect.sleep(Duration.millis(100)), sql`SELECT pg_notify('sql_driver_test', 'again')`).pipe(Effect.repeat({ until: () => heard.pollUnsafe() !== undefined }))
        return yield* Fiber.join(heard).pipe(Effect.timeout(Duration.seconds(10)))
      }))
      expect(afterwards).toEqual(Option.some("again"))
    } finally {
      await listener.dispose()
    }
    // Closed with the layer: none of its connections is left on the server.
    expect(await eventually(async () => (await opened()).length === 0)).toBe(true)
  })
})

describe("migration scripts", () => {
  test("are cut at top-level semicolons only: not in quotes, dollar-quoted bodies or comments", () => {
    const script = `
      CREATE TABLE a (t text DEFAULT 'x;y'); -- a comment; with a semicolon
      /* block; comment */ CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $fn$ SELECT 1; $fn$;
      DO $$ BEGIN PERFORM 1; END $$;
      SELECT "odd;name" FROM a;
    `
    expect(splitStatements(script)).toEqual([
      "CREATE TABLE a (t text DEFAULT 'x;y')",
      "-- a comment; with a semicolon\n      /* block; comment */ CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $fn$ SELECT 1; $fn$",
      "DO $$ BEGIN PERFORM 1; END $$",
      "SELECT \"odd;name\" FROM a"
    ])
  })
})
