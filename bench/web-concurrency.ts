/**
 * `bun bench/web-concurrency.ts [--quick]`: one Hookline process against WEB_CONCURRENCY=2 (a
 * supervisor and two processes on one port, SO_REUSEPORT) on the same database, both running at
 * once and taking turns under the same wrk load (bench/support/wrk.ts, runPairedHttpLoad): the
 * wallet read, a hook by id, a category list and the Zipf search mix over the seeded catalog
 * (100,000 hooks, BENCH_CATALOG_SIZE overrides; reused from the catalog bench when it is there).
 * Everything runs on this host: the servers, PostgreSQL and wrk share its cores. Rate limits are
 * off as in every bench, so two processes need no Redis here. CPU per request is left out: the
 * supervisor's pid is not where the work is done.
 */
import { demoCategories, demoHook } from "../src/Hooks/DemoData.js"
import { prepareCatalogDatabase, zipfQueries } from "./catalog.js"
import { createAccounts, startHookline } from "./support/processes.js"
import { benchSettings } from "./support/report.js"
import { runPairedHttpLoad } from "./support/wrk.js"

const quick = process.argv.includes("--quick")
const settings = benchSettings({ quick, warmupMs: quick ? 500 : 3_000 })
const size = Number(process.env.BENCH_CATALOG_SIZE ?? 100_000)
const progress = (text: string) => console.error(`[bench web-concurrency] ${text}`)
const databaseUrl = await prepareCatalogDatabase(size, progress)

const one = await startHookline(databaseUrl)
const two = await startHookline(databaseUrl, { WEB_CONCURRENCY: "2" })
try {
  const accounts = await createAccounts(one, settings.concurrency)
  const hookIds = Array.from({ length: 2_000 }, (_, i) => demoHook(Math.floor((i * 7_919) % size)).id)
  const slugs = demoCategories.map((category) => category.slug)
  const mix = zipfQueries(2_048)
  const rows: Array<{ readonly name: string; readonly path: (iteration: number, worker: number) => string }> = [
    { name: "wallet", path: () => "/v1/wallet" },
    { name: "get hook", path: (iteration, worker) => `/v1/hooks/${hookIds[(iteration * 31 + worker * 131) % hookIds.length]}` },
    { name: "list", path: (iteration, worker) => `/v1/hooks/list?category=${slugs[(iteration + worker) % slugs.length]}` },
    { name: "search, Zipf mix", path: (iteration, worker) => `/v1/hooks/search?q=${encodeURIComponent(mix[(iteration * 32 + worker) % mix.length])}` }
  ]
  const requests = (path: (iteration: number, worker: number) => string) =>
    Array.from({ length: 64 }, (_, iteration) =>
      accounts.map((account, worker) => ({ path: path(iteration, worker), headers: { authorization: `Bearer ${account.key}` } }))).flat()
  console.log(`| row | N = 1 req/s | N = 2 req/s | N = 2 / N = 1 | p50 ms (1 / 2) | p99 ms (1 / 2) | rounds req/s (1 / 2) |`)
  console.log(`|---|---|---|---|---|---|---|`)
  for (const row of rows) {
    progress(row.name)
    const [single, pair] = await runPairedHttpLoad(
      [{ url: one.url, serverPid: null, requests: requests(row.path) }, { url: two.url, serverPid: null, requests: requests(row.path) }],
      settings
    )
    const errors = single.errors + pair.errors > 0 ? ` (errors: ${single.errors} / ${pair.errors})` : ""
    console.log(
      `| ${row.name}${errors} | ${single.throughput.toFixed(0)} | ${pair.throughput.toFixed(0)} | ${(pair.throughput / single.throughput).toFixed(2)}× | ` +
        `${single.p50Ms.toFixed(1)} / ${pair.p50Ms.toFixed(1)} | ${single.p99Ms.toFixed(1)} / ${pair.p99Ms.toFixed(1)} | ` +
        `${single.roundThroughputs.join(", ")} / ${pair.roundThroughputs.join(", ")} |`
    )
  }
} finally {
  await two.stop()
  await one.stop()
}
