/**
 * Usage-summary and alert-trigger measurements, on scratch databases (run alone: `bun bench/usage.ts [hot|summary]`):
 *
 * - hot: the Ledger's reserve + settle statements (bench/support/baseline.ts, verbatim) in a
 *   closed loop, with and without migration 0007's wallet triggers and its journal index, the
 *   variants interleaved over several rounds so machine load hits them alike.
 * - summary: 10,000,000 journal rows generated with SQL (one heavy account with 1,000,000 rows
 *   in the last 93 days, the rest spread over 9,999 accounts and a year); the usage summary's
 *   query (src/Ledger/Usage.ts `statement`, compiled as the service runs it) under
 *   EXPLAIN (ANALYZE, BUFFERS), and its timings through the Usage service.
 */
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Pg from "pg"
import { HistoryRepo } from "../src/Ledger/HistoryRepo.js"
import { Usage } from "../src/Ledger/Usage.js"
import { SqlLive } from "../src/Sql.js"
import { reserve, settle } from "./support/baseline.js"
import { freshDatabase } from "./support/processes.js"
import { median } from "./support/report.js"

const runtimeOn = (databaseUrl: string) =>
  ManagedRuntime.make(
    Layer.mergeAll(Usage.layer, HistoryRepo.layer).pipe(
      Layer.provideMerge(SqlLive),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({
        env: { DATABASE_URL: databaseUrl, DATA_DIR: mkdtempSync(join(tmpdir(), "hookline-bench-usage-")) }
      })))
    )
  )


// ---------------------------------------------------------------- hot path
interface Variant {
  readonly name: string
  readonly index: boolean
  readonly triggers: boolean
  readonly thresholds: boolean
}
const variants: ReadonlyArray<Variant> = [
  { name: "before 0007 (no triggers, no usage index)", index: false, triggers: false, thresholds: false },
  { name: "usage index only", index: true, triggers: false, thresholds: false },
  { name: "0007 as shipped, no thresholds set", index: true, triggers: true, thresholds: false },
  { name: "0007, every wallet armed with a threshold", index: true, triggers: true, thresholds: true }
]

const hot = async () => {
  const databaseUrl = await freshDatabase("hookline_bench_usage_hot")
  const runtime = runtimeOn(databaseUrl)
  await runtime.runPromise(Effect.void) // migrates
  const pool = new Pg.Pool({ connectionString: databaseUrl, max: 10 })
  const accounts = 16
  await pool.query(`
    INSERT INTO accounts (id, plan) SELECT 'acct_' || lpad(i::text, 32, '0'), 'enterprise' FROM generate_series(1, ${accounts}) i;
    INSERT INTO wallets (account_id, topup_balance) SELECT id, 1000000000000 FROM accounts;`)
  const apply = async (variant: Variant) => {
    const state = variant.triggers ? "ENABLE" : "DISABLE"
    await pool.query(`ALTER TABLE wallets ${state} TRIGGER wallets_low_balance`)
    await pool.query(`ALTER TABLE credit_journal ${state} TRIGGER credit_journal_rearm_alerts`)
    await pool.query(variant.index
      ? "CREATE INDEX IF NOT EXISTS credit_journal_account_time ON credit_journal (account_id, created_at) INCLUDE (entry_type, operation, amount)"
      : "DROP INDEX IF EXISTS credit_journal_account_time")
    await pool.query(variant.thresholds
      ? "UPDATE wallets SET low_balance_threshold = 1, low_balance_armed = true"
      : "UPDATE wallets SET low_balance_threshold = NULL, low_balance_armed = false")
    await pool.query("VACUUM ANALYZE wallets")
  }
  const workers = 16
  const warmupMs = 1_000
  const windowMs = Number(process.env.BENCH_USAGE_WINDOW_MS ?? 6_000)
  const measure = async () => {
    const start = Date.now()
    const end = start + warmupMs + windowMs
    let cycles = 0
    await Promise.all(Array.from({ length: workers }, async (_, worker) => {
      const accountId = `acct_${String((worker % accounts) + 1).padStart(32, "0")}`
      while (Date.now() < end) {
        const hold = await reserve(pool, accountId, 2, { operation: "search" })
        if (hold === null) throw new Error("reserve refused")
        await settle(pool, hold.id, 1)
        if (Date.now() >= start + warmupMs && Date.now() < end) cycles++
      }
    }))
    return cycles / (windowMs / 1000)
  }
  const rounds = Number(process.env.BENCH_USAGE_ROUNDS ?? 3)
  const results = new Map<string, Array<number>>(variants.map((v) => [v.name, []]))
  for (let round = 0; round < rounds; round++) {
    // Rotate the order each round, so no variant always runs first (or last).
    const order = variants.map((_, i) => variants[(i + round) % variants.length])
    for (const variant of order) {
      await apply(variant)
      const rate = await measure()
      results.get(variant.name)!.push(rate)
      console.error(`round ${round + 1} ${variant.name}: ${rate.toFixed(0)} reserve+settle/s`)
    }
  }
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM webhook_deliveries")
  console.log(`\n| variant | reserve+settle per s (median of ${rounds}) | rounds |\n|---|---:|---|`)
  for (const variant of variants) {
    const rates = results.get(variant.name)!
    console.log(`| ${variant.name} | ${median(rates).toFixed(0)} | ${rates.map((r) => r.toFixed(0)).join(", ")} |`)
  }
  console.log(`(${workers} closed-loop workers, pool of 10, ${windowMs / 1000} s windows; deliveries written: ${rows[0].n})`)
  await pool.end()
  await runtime.dispose()
}

// ---------------------------------------------------------------- summary at 10M rows
const summary = async () => {
  // BENCH_USAGE_REUSE=1: measure the journal a previous run generated (the load takes minutes).
  const reuse = process.env.BENCH_USAGE_REUSE === "1"
  const databaseUrl = reuse
    ? (process.env.BENCH_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres").replace(/\/[^/]*$/, "/hookline_bench_usage_10m")
    : await freshDatabase("hookline_bench_usage_10m")
  const runtime = runtimeOn(databaseUrl)
  const usage = await runtime.runPromise(Usage)
  const history = await runtime.runPromise(HistoryRepo)
  const pool = new Pg.Pool({ connectionString: databaseUrl, max: 2 })
  const heavy = `acct_${"f".repeat(32)}`
  const typical = `acct_${String(42).padStart(32, "0")}`
  const totalRows = Number(process.env.BENCH_USAGE_ROWS ?? 10_000_000)
  const heavyRows = Math.floor(totalRows / 10)
  const started = Date.now()
  if (!reuse) await load()
  const loadSeconds = (Date.now() - started) / 1000
  const { rows: size } = await pool.query(
    "SELECT count(*)::int AS n, pg_size_pretty(pg_total_relation_size('credit_journal')) AS size, pg_size_pretty(pg_relation_size('credit_journal_account_time')) AS index FROM credit_journal"
  )
  console.log(`${size[0].n} journal rows (${size[0].size}; the usage index ${size[0].index}), generated in ${loadSeconds.toFixed(0)} s\n`)
  await measure()
  await pool.end()
  await runtime.dispose()

  async function load() {
  await pool.query(`
    INSERT INTO accounts (id, plan) SELECT 'acct_' || lpad(i::text, 32, '0'), 'pro' FROM generate_series(1, 9999) i;
    INSERT INTO accounts (id, plan) VALUES ('${heavy}', 'enterprise');
    INSERT INTO wallets (account_id) SELECT id FROM accounts;`)
  // Load without per-row index upkeep, foreign-key checks or triggers; indexes are built after.
  const indexes = ["credit_journal_account", "credit_journal_account_time", "credit_journal_hold", "credit_journal_grant_reference"]
  const { rows: definitions } = await pool.query<{ indexdef: string }>(
    "SELECT indexdef FROM pg_indexes WHERE tablename = 'credit_journal' AND indexname = ANY($1)",
    [indexes]
  )
  for (const name of indexes) await pool.query(`DROP INDEX ${name}`)
  const kinds = `(ARRAY['reserve','reserve','reserve','reserve','reserve','reserve','release','release','release','grant'])[1 + (i % 10)]`
  const operations = `(ARRAY['search','list','hook','prediction'])[1 + (i / 10 % 4)]`
  const batch = 1_000_000
  for (let first = 1; first <= totalRows; first += batch) {
    const last = Math.min(totalRows, first + batch - 1)
    await pool.query(`
      SET session_replication_role = replica;
      INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, created_at)
      SELECT 'txn_' || lpad(to_hex(i), 32, '0'),
             CASE WHEN i <= ${heavyRows} THEN '${heavy}' ELSE 'acct_' || lpad((1 + i % 9999)::text, 32, '0') END,
             k, 'topup',
             CASE k WHEN 'reserve' THEN -2 WHEN 'release' THEN 1 ELSE 100 END,
             0, 0,
             CASE k WHEN 'grant' THEN 'admin' ELSE o END,
             now() - random() * CASE WHEN i <= ${heavyRows} THEN interval '93 days' ELSE interval '365 days' END
        FROM (SELECT i, ${kinds} AS k, ${operations} AS o FROM generate_series(${first}, ${last}) i) g;
      SET session_replication_role = origin;`)
    console.error(`journal rows: ${last}`)
  }
  for (const { indexdef } of definitions) await pool.query(indexdef)
  await pool.query("VACUUM ANALYZE credit_journal")
  }

  async function measure() {
  const to = new Date()
  const from = new Date(to.getTime() - 93 * 86_400_000)
  for (const [who, accountId] of [["typical account", typical], ["heavy account (1M rows in range)", heavy]] as const) {
    for (const groupBy of ["day", "operation"] as const) {
      const [text, params] = history.usageStatement(accountId, from, to, groupBy).compile()
      const plan = await pool.query(`EXPLAIN (ANALYZE, BUFFERS) ${text}`, [...params])
      const timings: Array<number> = []
      for (let run = 0; run < 7; run++) {
        const t0 = performance.now()
        await runtime.runPromise(usage.summarise(accountId, { from, to, group_by: groupBy }))
        timings.push(performance.now() - t0)
      }
      console.log(`### ${who}, group_by=${groupBy}, 93 days: median ${median(timings).toFixed(1)} ms through the Usage service (7 runs: ${timings.map((t) => t.toFixed(1)).join(", ")})\n`)
      console.log("```\n" + plan.rows.map((row: Record<string, string>) => row["QUERY PLAN"]).join("\n") + "\n```\n")
    }
  }
  }
}

const which = process.argv[2] ?? "all"
if (which === "hot" || which === "all") await hot()
if (which === "summary" || which === "all") await summary()
process.exit(0)
