/**
 * Wallet and categories over HTTP: the real server against the bare baseline, same database,
 * same keys, same load. Both routes are unmetered, so the ratio is the framework's own cost per
 * request (decode, middleware, encode, tracing, metrics) on top of one small query.
 */
import { httpOperation, runLoad } from "./support/load.js"
import { createAccounts, freshDatabase, startBaseline, startHookline } from "./support/processes.js"
import { type BenchOptions, benchSettings, type ScenarioResult } from "./support/report.js"

const categories = Array.from({ length: 24 }, (_, i) => ({ slug: `category-${i + 1}`, name: `Category ${String(i + 1).padStart(2, "0")}` }))

export const runCoreBench = async (options: BenchOptions): Promise<Array<ScenarioResult>> => {
  const settings = benchSettings(options)
  const databaseUrl = await freshDatabase()
  const hookline = await startHookline(databaseUrl)
  try {
    const accounts = await createAccounts(hookline, settings.concurrency)
    await hookline.admin("PUT", "/catalog/categories", categories)
    const baseline = await startBaseline(databaseUrl)
    try {
      const keyOf = (worker: number) => ({ authorization: `Bearer ${accounts[worker % accounts.length].key}` })
      const measure = (path: string) => async (url: string) =>
        runLoad({ ...settings, operation: httpOperation(url, (worker) => ({ path, headers: keyOf(worker) })) })

      const wallet = measure("/v1/wallet")
      const listCategories = measure("/v1/hooks/categories")
      return [
        {
          scenario: "wallet",
          operation: `GET /v1/wallet, ${accounts.length} keys`,
          unit: "req/s",
          hookline: await wallet(hookline.url),
          baseline: await wallet(baseline.url)
        },
        {
          scenario: "categories",
          operation: `GET /v1/hooks/categories (${categories.length})`,
          unit: "req/s",
          hookline: await listCategories(hookline.url),
          baseline: await listCategories(baseline.url)
        }
      ]
    } finally {
      await baseline.stop()
    }
  } finally {
    await hookline.stop()
  }
}
