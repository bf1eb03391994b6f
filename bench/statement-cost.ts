/**
 * The CPU one SQL statement costs in this process, by the way it is run: the `pg` driver alone,
 * an @effect/sql-pg statement (its own wire protocol, prepared statements cached), and the
 * Effect combinators a request path might wrap around a statement. CPU is this process's user +
 * system time (process.cpuUsage, every thread: the garbage collector's included) per statement,
 * with 32 statements in flight, so it does not depend on what else the machine is doing the way
 * req/s does. Postgres's own CPU is not counted.
 *
 *   bun bench/statement-cost.ts [--statements 20000]
 *
 * Standalone (not a row of bench/run.ts): it explains the rows, it is not one. See
 * bench/README.md, "Where a request's CPU goes".
 */
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, ManagedRuntime, Redacted, References } from "effect"
import { SqlClient } from "effect/sql"
import { parseArgs } from "node:util"
import Pg from "pg"
import { traced } from "../src/Observability/Tracing.js"
import { freshDatabase } from "./support/processes.js"

const { values } = parseArgs({ args: process.argv.slice(2), options: { statements: { type: "string" } } })
const statements = Number(values.statements ?? 20_000)
const inFlight = 32

const url = await freshDatabase("hookline_bench_statements")
const pool = new Pg.Pool({ connectionString: url, max: 10 })
await pool.query("CREATE TABLE wallets (account_id text PRIMARY KEY, monthly_balance bigint NOT NULL, topup_balance bigint NOT NULL)")
await pool.query("INSERT INTO wallets SELECT 'acct_' || i, 100, 200 FROM generate_series(1, 32) i")
const accountOf = (n: number) => `acct_${(n % 32) + 1}`
const text = "SELECT monthly_balance, topup_balance FROM wallets WHERE account_id = $1"

const runtime = ManagedRuntime.make(PgClient.layer({ url: Redacted.make(url), maxConnections: 10 }))
const sql = await runtime.runPromise(SqlClient.SqlClient)
const statementOf = (n: number) => sql`SELECT monthly_balance, topup_balance FROM wallets WHERE account_id = ${accountOf(n)}`

/** `statements` effects, 32 at a time, on the untraced path a sampled-out request takes. */
const effects = (make: (n: number) => Effect.Effect<unknown, unknown>) => () =>
  runtime.runPromise(
    Effect.forEach(Array.from({ length: statements }, (_, n) => n), make, { concurrency: inFlight, discard: true }).pipe(
      Effect.provideService(References.TracerEnabled, false)
    )
  )
const promises = (make: (n: number) => Promise<unknown>) => async () => {
  let next = 0
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < statements) await make(next++)
  }))
}

const rows: Array<{ way: string; cpuMicros: number }> = []
const measure = async (way: string, body: () => Promise<unknown>) => {
  await body() // warm-up: JIT and the pool's connections
  const before = process.cpuUsage()
  await body()
  const used = process.cpuUsage(before)
  rows.push({ way, cpuMicros: (used.user + used.system) / statements })
}

await measure("pg: pool.query", promises((n) => pool.query(text, [accountOf(n)])))
await measure("@effect/sql-pg statement", effects(statementOf))
await measure("@effect/sql-pg + Effect.timeout", effects((n) => Effect.timeout(statementOf(n), Duration.seconds(5))))
await measure("@effect/sql-pg + Effect.scoped", effects((n) => Effect.scoped(statementOf(n))))
await measure("@effect/sql-pg + Effect.withSpan", effects((n) => Effect.withSpan(statementOf(n), "span")))
const spanFn = Effect.fn("span")(function*(n: number) {
  return yield* statementOf(n)
})
await measure("@effect/sql-pg + Effect.fn(\"span\")", effects(spanFn))
await measure("@effect/sql-pg + traced (span only when tracing)", effects((n) => traced("span")(statementOf(n))))

await runtime.dispose()
await pool.end()

const base = rows[0].cpuMicros
console.log(`CPU per statement (${statements.toLocaleString("en-US")} statements, ${inFlight} in flight, this process only)\n`)
console.log("| way | CPU µs/statement | × pg |\n|---|---:|---:|")
for (const row of rows) console.log(`| ${row.way} | ${row.cpuMicros.toFixed(1)} | ${(row.cpuMicros / base).toFixed(2)} |`)
