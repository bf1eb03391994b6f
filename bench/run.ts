/**
 * `npm run bench` (or `npm run bench -- --quick`): every scenario against the real server on the
 * local Postgres and against the bare baseline, one table on stdout, bench/results.json beside
 * this file (`-- --only core,catalog` runs those sections alone, and results.json holds their rows
 * only). See bench/README.md for how to read it.
 */
import { existsSync, writeFileSync } from "node:fs"
import { cpus, totalmem } from "node:os"
import { join } from "node:path"
import Pg from "pg"
import { runCoreBench } from "./core.js"
import { runLedgerBench } from "./ledger.js"
import { pairedRounds } from "./support/wrk.js"
import { adminDatabaseUrl, poolSize } from "./support/processes.js"
import { type BenchOptions, benchSettings, ratio, renderTable, type ScenarioResult, unavailable } from "./support/report.js"

/** `--warmup 3`: another warm-up per side, in seconds (to compare with runs made before it was 10 s). */
const warmupArgument = process.argv.indexOf("--warmup")
const options: BenchOptions = {
  quick: process.argv.includes("--quick"),
  ...(warmupArgument === -1 ? {} : { warmupMs: Number(process.argv[warmupArgument + 1]) * 1000 })
}
/** `--only core,catalog`: run these sections alone (core, catalog, predictions, ledger, webhooks, idempotency, hook-reading). */
const onlyArgument = process.argv.indexOf("--only")
const only = onlyArgument === -1 ? null : new Set((process.argv[onlyArgument + 1] ?? "").split(","))
const wanted = (section: string) => only === null || only.has(section)
const settings = benchSettings(options)
const started = performance.now()
const rows: Array<ScenarioResult> = []
let failed = false

const progress = (text: string) => console.error(`[bench ${((performance.now() - started) / 1000).toFixed(0).padStart(3)} s] ${text}`)

const failure = (error: unknown) => (error instanceof Error ? error.message.split("\n")[0] : String(error))

/** A module that takes longer than this has hung (a lost connection, a job never finishing). */
const sectionTimeoutMs = (options.quick ? 3 : 20) * 60_000

/** Runs one bench module's scenarios; on failure its rows say so and the run exits non-zero. */
const section = async (name: string, run: () => Promise<ReadonlyArray<ScenarioResult>>, placeholders: ReadonlyArray<ScenarioResult>) => {
  progress(name)
  let timer: ReturnType<typeof setTimeout> | undefined
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no result after ${sectionTimeoutMs / 60_000} minutes`)), sectionTimeoutMs)
  })
  try {
    rows.push(...(await Promise.race([run(), hung])))
  } catch (error) {
    failed = true
    console.error(error)
    rows.push(...placeholders.map((row) => ({ ...row, note: `failed: ${failure(error)}` })))
  } finally {
    clearTimeout(timer)
  }
}

type BenchModule = Record<string, (options: BenchOptions) => Promise<ReadonlyArray<ScenarioResult>>>

/** A bench module another area owns: run when its file exists, else a "not available" row. */
const optional = async (file: string, entry: string, placeholders: ReadonlyArray<ScenarioResult>) => {
  const path = join(import.meta.dir, file)
  if (!existsSync(path)) {
    rows.push(...placeholders.map((row) => ({ ...row, note: `not available: bench/${file} is not there` })))
    return
  }
  await section(placeholders.map((row) => row.scenario).join(", "), async () => {
    const module = (await import(path)) as BenchModule
    const run = module[entry]
    if (typeof run !== "function") throw new Error(`bench/${file} does not export ${entry}`)
    const result: unknown = await run(options)
    if (!Array.isArray(result)) throw new Error(`bench/${file} ${entry} returned no rows (ScenarioResult[], bench/support/report.ts)`)
    return result as ReadonlyArray<ScenarioResult>
  }, placeholders)
}

if (wanted("core")) {
  await section("wallet, categories", () => runCoreBench(options), [
    unavailable("wallet", "GET /v1/wallet", ""),
    unavailable("categories", "GET /v1/hooks/categories", "")
  ])
}
if (wanted("catalog")) {
  await optional("catalog.ts", "runCatalogBench", [
    unavailable("metered search", "GET /v1/hooks/search", ""),
    unavailable("list", "GET /v1/hooks/list", ""),
    unavailable("get hook", "GET /v1/hooks/{id}", "")
  ])
}
if (wanted("predictions")) {
  await optional("predictions.ts", "runPredictionsBench", [
    unavailable("predict pipeline", "upload link → PUT 15 s clip → scored", "")
  ])
}
if (wanted("ledger")) {
  await section("ledger", () => runLedgerBench(options), [
    unavailable("ledger hot account", "reserve + settle", ""),
    unavailable("ledger many accounts", "reserve + settle", "")
  ])
}
if (wanted("webhooks")) {
  await optional("webhooks.ts", "runWebhooksBench", [
    unavailable("webhook delivery", "event → signed POST → 2xx", "")
  ])
}
if (wanted("idempotency")) {
  await optional("idempotency.ts", "runIdempotencyBench", [
    unavailable("idempotent grant", "POST /admin/accounts/{id}/credits with Idempotency-Key", ""),
    unavailable("idempotent replay", "POST /admin/accounts/{id}/credits, key already answered", "")
  ])
}

if (wanted("hook-reading")) {
  await optional("hook-reading.ts", "runHookReadingBench", [
    unavailable("hook reading", "held-out clip → hook_text, category", "")
  ])
}

// The server's version and its buffer cache: a catalog larger than shared_buffers is read from
// the kernel's page cache page by page, which the catalog rows' figures depend on.
const postgres = await (async () => {
  const client = new Pg.Client({ connectionString: adminDatabaseUrl })
  await client.connect()
  try {
    const setting = async (name: string) => (await client.query<Record<string, string>>(`SHOW ${name}`)).rows[0][name]
    return `PostgreSQL ${await setting("server_version")}, shared_buffers ${await setting("shared_buffers")}`
  } finally {
    await client.end()
  }
})()

const elapsed = (performance.now() - started) / 1000
const table = renderTable(rows)
console.log(`\nHookline benchmark (${options.quick ? "quick" : "full"}): ${settings.concurrency} concurrent, ` +
  `${settings.warmupMs / 1000} s warm-up + ${settings.durationMs / 1000} s measured per side (HTTP rows: ${pairedRounds} windows, the sides taking turns), pool ${poolSize}, ` +
  `${cpus().length} CPUs, Bun ${Bun.version}, ${postgres}; ${elapsed.toFixed(0)} s in all\n`)
console.log(table)

const round = (value: number) => Math.round(value * 100) / 100
const side = (result: ScenarioResult["hookline"]) =>
  result === null ? null : {
    throughput: round(result.throughput),
    p50_ms: round(result.p50Ms),
    p90_ms: round(result.p90Ms),
    p99_ms: round(result.p99Ms),
    max_ms: round(result.maxMs),
    cpu_ms_per_request: result.cpuMsPerRequest === undefined || result.cpuMsPerRequest === null ? null : Math.round(result.cpuMsPerRequest * 1000) / 1000,
    ok: result.ok,
    errors: result.errors,
    first_error: result.firstError,
    round_throughputs: result.roundThroughputs ?? null
  }
writeFileSync(
  join(import.meta.dir, "results.json"),
  JSON.stringify(
    {
      generated_at: new Date().toISOString(),
      mode: options.quick ? "quick" : "full",
      settings: { ...settings, pool_size: poolSize },
      machine: { cpus: cpus().length, cpu_model: cpus()[0]?.model ?? null, memory_gb: round(totalmem() / 2 ** 30), bun: Bun.version, postgres },
      elapsed_seconds: round(elapsed),
      scenarios: rows.map((row) => ({
        scenario: row.scenario,
        operation: row.operation,
        unit: row.unit,
        hookline: side(row.hookline),
        baseline: side(row.baseline),
        ratio: ratio(row) === null ? null : round(ratio(row)!),
        note: row.note ?? null
      }))
    },
    null,
    2
  ) + "\n"
)
progress(`wrote bench/results.json`)
process.exit(failed ? 1 : 0)
