/**
 * The embedded database's in-process connections (src/EmbeddedSession.ts) under the real sql-pg
 * client and a real PGlite: several connections share PGlite's one session, and each gets its own
 * answers; a transaction keeps the session to itself; a failure inside PGlite fails one connection
 * and the next statements run; a connection holding the session idle is closed and rolled back.
 * Waits are on conditions and events, never on elapsed time.
 */
import { PGlite } from "@electric-sql/pglite"
import { PgClient } from "@effect/sql-pg"
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { EmbeddedSession } from "../src/EmbeddedSession.js"
import { isDatabaseUnavailable } from "../src/Sql.js"

const failures: Array<string> = []
let db: PGlite
let explode = false
let scope: Scope.Closeable
let sql: PgClient.PgClient
let session: EmbeddedSession

/** A client as the server makes one: several pooled connections, each an in-process stream. */
const clientOn = (on: EmbeddedSession) =>
  PgClient.make({ stream: on.connect, database: "postgres", username: "postgres", ssl: false, maxConnections: 4 }).pipe(
    Effect.provide(Reactivity.layer),
    Scope.provide(scope)
  )

beforeAll(async () => {
  db = await PGlite.create()
  // A statement naming `explode` makes PGlite itself throw, as a fault inside it would.
  const run = db.execProtocolRaw.bind(db)
  db.execProtocolRaw = (message, options) =>
    explode && Buffer.from(message).includes("explode") ? Promise.reject(new Error("PGlite fault")) : run(message, options)
  session = new EmbeddedSession(db, { idleLimitMs: 300, onFailure: (reason) => failures.push(reason) })
  scope = Effect.runSync(Scope.make())
  sql = await Effect.runPromise(clientOn(session))
  await Effect.runPromise(sql`CREATE TABLE tenants (id int PRIMARY KEY, name text NOT NULL)`)
  await Effect.runPromise(sql`INSERT INTO tenants SELECT n, 'tenant ' || n FROM generate_series(1, 50) AS n`)
}, 60_000)

afterAll(async () => {
  await Effect.runPromise(Scope.close(scope, Exit.void))
  await db.close()
})

describe("the embedded database's connections", () => {
  test("400 concurrent calls (three shapes of statement and a transaction) over four connections: each caller gets its own rows", async () => {
    const calls = Array.from({ length: 400 }, (_, i) => {
      const id = 1 + (i % 50)
      switch (i % 4) {
        case 3:
          return sql.withTransaction(Effect.map(
            Effect.andThen(sql`UPDATE tenants SET name = name WHERE id = ${id}`, sql<{ name: string }>`SELECT name FROM tenants WHERE id = ${id}`),
            (rows) => rows.length === 1 && rows[0].name === `tenant ${id}`
          ))
        case 0:
          return Effect.map(sql<{ id: number; name: string }>`SELECT id, name FROM tenants WHERE id = ${id}`, (rows) =>
            rows.length === 1 && rows[0].id === id && rows[0].name === `tenant ${id}`)
        case 1:
          return Effect.map(sql<{ total: string; pad: string }>`SELECT ${String(i)}::text AS total, repeat('x', ${id}) AS pad`, (rows) =>
            rows[0].total === String(i) && rows[0].pad.length === id)
        default:
          return Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM tenants WHERE id <= ${id}`, (rows) => rows[0].n === id)
      }
    })
    const answers = await Effect.runPromise(Effect.all(calls, { concurrency: "unbounded" }))
    expect(answers.filter((own) => !own).length).toBe(0)
  })

  test("a transaction keeps the session: another connection's statement runs after it ends and never sees its rows", async () => {
    const inserted = Deferred.makeUnsafe<void>()
    const release = Deferred.makeUnsafe<void>()
    const transaction = sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO tenants VALUES (1000, 'uncommitted')`
      yield* Deferred.succeed(inserted, undefined)
      yield* Deferred.await(release)
      return yield* Effect.fail("roll back" as const)
    }))
    const writer = Effect.runFork(transaction)
    await Effect.runPromise(Deferred.await(inserted))
    const reader = Effect.runFork(sql<{ n: number }>`SELECT count(*)::int AS n FROM tenants WHERE id = 1000`)
    // Let the transaction end only once the reader waits for the session.
    while (session.waitingConnections === 0) await Bun.sleep(1)
    await Effect.runPromise(Deferred.succeed(release, undefined))
    expect(Exit.isFailure(await Effect.runPromise(Fiber.await(writer)))).toBe(true)
    expect((await Effect.runPromise(Fiber.join(reader)))[0].n).toBe(0)
  })

  test("a failure inside PGlite fails that statement's connection alone (a lost connection: 503), and the next statements run", async () => {
    explode = true
    try {
      const failed = await Effect.runPromise(Effect.flip(sql`SELECT 'explode' AS x`))
      expect(isDatabaseUnavailable(failed)).toBe(true)
      expect(failures).toContain("the embedded database failed a statement; its connection is closed")
      const after = await Effect.runPromise(Effect.all(
        Array.from({ length: 20 }, (_, i) => Effect.map(sql<{ n: number }>`SELECT ${i}::int AS n`, (rows) => rows[0].n === i)),
        { concurrency: "unbounded" }
      ))
      expect(after.every(Boolean)).toBe(true)
    } finally {
      explode = false
    }
  })

  test("a connection holding the session idle in a transaction past the limit is closed and rolled back; the others go on", async () => {
    const inserted = Deferred.makeUnsafe<void>()
    const release = Deferred.makeUnsafe<void>()
    const stuck = Effect.runFork(sql.withTransaction(Effect.gen(function*() {
      yield* sql`INSERT INTO tenants VALUES (2000, 'held')`
      yield* Deferred.succeed(inserted, undefined)
      yield* Deferred.await(release)
    })))
    await Effect.runPromise(Deferred.await(inserted))
    // Waits for the session until the stuck transaction's connection is closed.
    const rows = await Effect.runPromise(sql<{ n: number }>`SELECT count(*)::int AS n FROM tenants WHERE id = 2000`)
    expect(rows[0].n).toBe(0)
    expect(failures.some((reason) => reason.startsWith("a connection held the embedded database for 300 ms"))).toBe(true)
    await Effect.runPromise(Deferred.succeed(release, undefined))
    const exit = await Effect.runPromise(Fiber.await(stuck))
    expect(Exit.isFailure(exit) && isDatabaseUnavailable(Option.getOrUndefined(Cause.findErrorOption(exit.cause)))).toBe(true)
    expect(await Effect.runPromise(Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM tenants`, (r) => r[0].n))).toBe(50)
  })
})
