/**
 * Wallet and categories over HTTP: the real server against the bare baseline, same database,
 * same keys, same load. Both routes are unmetered, so the ratio is the framework's own cost per
 * request (decode, middleware, encode, tracing, metrics) on top of one small query.
 *
 * The framework-floor row puts a number on the part Hookline cannot remove: a minimal HttpApi
 * on the same stack (bench/support/floor.ts, no database) against a bare Bun.serve. Hookline's
 * wallet CPU per request is read against the floor's (the goal is at most 2×).
 */
import type { HttpRequestSpec } from "./support/load.js"
import { createAccounts, freshDatabase, startBaseline, startFloor, startHookline } from "./support/processes.js"
import { type BenchOptions, benchSettings, type ScenarioResult } from "./support/report.js"
import { runPairedHttpLoad } from "./support/wrk.js"

const categories = Array.from({ length: 24 }, (_, i) => ({ slug: `category-${i + 1}`, name: `Category ${String(i + 1).padStart(2, "0")}` }))

export const runCoreBench = async (options: BenchOptions): Promise<Array<ScenarioResult>> => {
  const settings = benchSettings(options)
  const databaseUrl = await freshDatabase()
  const hookline = await startHookline(databaseUrl)
  try {
    const accounts = await createAccounts(hookline, settings.concurrency)
    await hookline.admin("PUT", "/catalog/categories", categories)
    const requests = (path: string): Array<HttpRequestSpec> =>
      accounts.map((account) => ({ path, headers: { authorization: `Bearer ${account.key}` } }))
    type Server = { readonly url: string; readonly pid: number }
    // Both sides take turns (bench/support/wrk.ts, runPairedHttpLoad), so they share the machine's minutes.
    const compare = async (path: string, server: Server, bare: Server) => {
      const side = (server: Server) => ({ url: server.url, serverPid: server.pid, requests: requests(path) })
      const [hookline, baseline] = await runPairedHttpLoad([side(server), side(bare)], settings)
      return { hookline, baseline }
    }

    const floor = await (async () => {
      const keys = accounts.map((account) => account.key)
      const framework = await startFloor("framework", keys)
      try {
        const bare = await startFloor("bare", keys)
        try {
          return {
            scenario: "framework floor",
            operation: "minimal HttpApi GET, bearer Map lookup, no database",
            unit: "req/s",
            ...(await compare("/v1/wallet", framework, bare)),
            note: "Hookline column: a minimal Effect HttpApi through HttpRouter.toWebHandler on Bun.serve (bench/support/floor.ts); baseline: bare Bun.serve"
          } satisfies ScenarioResult
        } finally {
          await bare.stop()
        }
      } finally {
        await framework.stop()
      }
    })()

    const baseline = await startBaseline(databaseUrl)
    try {
      return [
        floor,
        {
          scenario: "wallet",
          operation: `GET /v1/wallet, ${accounts.length} keys`,
          unit: "req/s",
          ...(await compare("/v1/wallet", hookline, baseline))
        },
        {
          scenario: "categories",
          operation: `GET /v1/hooks/categories (${categories.length})`,
          unit: "req/s",
          ...(await compare("/v1/hooks/categories", hookline, baseline))
        }
      ]
    } finally {
      await baseline.stop()
    }
  } finally {
    await hookline.stop()
  }
}
