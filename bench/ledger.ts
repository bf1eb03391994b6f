/**
 * The Ledger under contention: reserve 1 credit then settle it, as fast as 32 concurrent callers
 * can, on one hot account (every operation waits for the same wallet row lock) and on many
 * accounts (one per caller). Hookline's side is the real Ledger service (Effect, @effect/sql) in
 * this process; the baseline sends the same two statements with the `pg` driver. Both use a
 * pool of 10 connections on the same database.
 *
 * Before measuring, one operation is traced to check that the baseline's statements are still
 * the Ledger's (whitespace aside): if the Ledger's SQL changed, the row says so.
 */
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Pg from "pg"
import { Ledger } from "../src/Ledger/Ledger.js"
import { SqlLive } from "../src/Sql.js"
import { normalizeSql, reserve, reserveStatement, resolveStatement, settle } from "./support/baseline.js"
import { runLoad } from "./support/load.js"
import { createAccounts, freshDatabase, poolSize, startHookline } from "./support/processes.js"
import { type BenchOptions, benchSettings, type ScenarioResult } from "./support/report.js"
import { collectSpans } from "../test/support/spans.js"

/** The Ledger's statements as it runs them, from the spans of one reserve + settle. */
const ledgerStatements = async (runtime: ManagedRuntime.ManagedRuntime<Ledger, unknown>, accountId: string) => {
  const { spans, tracer: collector } = collectSpans()
  await runtime.runPromise(
    Effect.flatMap(Ledger, (ledger) =>
      Effect.flatMap(ledger.reserve(accountId, 1, { operation: "hook" }), (hold) => ledger.settle(hold.id, 1))
    ).pipe(Effect.withTracer(collector))
  )
  const statementUnder = (name: string) => {
    const parent = spans.find((span) => span.name === name)
    const child = spans.find((span) => span.attributes.has("db.query.text") && span.parent._tag === "Some" && span.parent.value.spanId === parent?.spanId)
    return normalizeSql(String(child?.attributes.get("db.query.text") ?? ""))
  }
  return { reserve: statementUnder("LedgerRepo.reserveHold"), settle: statementUnder("LedgerRepo.settleHold") }
}

export const runLedgerBench = async (options: BenchOptions): Promise<Array<ScenarioResult>> => {
  const settings = benchSettings(options)
  const databaseUrl = await freshDatabase()
  // The server migrates the database and opens the accounts, then leaves the machine to the bench.
  const server = await startHookline(databaseUrl)
  const accounts = await createAccounts(server, settings.concurrency)
  await server.stop()

  const dataDir = mkdtempSync(join(tmpdir(), "hookline-bench-ledger-"))
  const config = ConfigProvider.fromEnv({
    env: { DATABASE_URL: databaseUrl, DATA_DIR: dataDir, PG_MAX_CONNECTIONS: String(poolSize), LOG_LEVEL: "warning" }
  })
  const runtime = ManagedRuntime.make(Ledger.layer.pipe(Layer.provide(SqlLive), Layer.provide(ConfigProvider.layer(config))))
  const pool = new Pg.Pool({ connectionString: databaseUrl, max: poolSize, application_name: "hookline-baseline" })
  try {
    const ledger = await runtime.runPromise(Ledger)
    const hookline = (accountFor: (worker: number) => string) => (worker: number) =>
      runtime.runPromise(
        Effect.flatMap(ledger.reserve(accountFor(worker), 1, { operation: "hook" }), (hold) => ledger.settle(hold.id, 1))
      ).then(() => true)
    const bare = (accountFor: (worker: number) => string) => async (worker: number) => {
      const hold = await reserve(pool, accountFor(worker), 1, { operation: "hook" })
      if (hold === null) throw new Error("insufficient credits")
      return (await settle(pool, hold.id, 1)) !== null
    }

    const running = await ledgerStatements(runtime, accounts[0].accountId)
    const copied = {
      reserve: normalizeSql(reserveStatement("a", 1, { operation: "hook" }, "h", 600).text),
      settle: normalizeSql(resolveStatement("h", 1, "settled").text)
    }
    const drift = running.reserve !== copied.reserve || running.settle !== copied.settle
      ? "the baseline's reserve/settle SQL no longer matches the Ledger's (update bench/support/baseline.ts)"
      : undefined

    const hot = () => accounts[0].accountId
    const many = (worker: number) => accounts[worker % accounts.length].accountId
    const row = async (scenario: string, operation: string, accountFor: (worker: number) => string): Promise<ScenarioResult> => ({
      scenario,
      operation,
      unit: "ops/s",
      hookline: await runLoad({ ...settings, operation: hookline(accountFor) }),
      baseline: await runLoad({ ...settings, operation: bare(accountFor) }),
      ...(drift === undefined ? {} : { note: drift })
    })
    return [
      await row("ledger hot account", "reserve 1 + settle 1, one account", hot),
      await row("ledger many accounts", `reserve 1 + settle 1, ${accounts.length} accounts`, many)
    ]
  } finally {
    await pool.end()
    await runtime.dispose()
    rmSync(dataDir, { recursive: true, force: true })
  }
}
