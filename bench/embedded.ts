/**
 * The embedded default under load: `bun bench/embedded.ts [--root DIR] [--connections 16] [--seconds 10]`.
 * Starts `bun <root>/src/main.ts` with no DATABASE_URL on a fresh data directory (the demo account,
 * a 2,000-hook demo catalog, its wallet topped up so searches never run out), then loads the
 * wallet and a search with wrk, one after the other, and prints requests per second, latency,
 * errors and the server's CPU per request. `--root` points at another checkout (an A/B of two
 * builds on the same machine; its node_modules must be installed).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { parseArgs } from "node:util"
import { embeddedEnvironment, freePort, startUntilBanner } from "../test/support/process.js"
import { runHttpLoad } from "./support/wrk.js"

const { values } = parseArgs({
  options: {
    root: { type: "string", default: resolve(import.meta.dir, "..") },
    connections: { type: "string", default: "16" },
    seconds: { type: "string", default: "10" }
  }
})
const root = resolve(values.root)
const dataDir = mkdtempSync(join(tmpdir(), "hookline-bench-embedded-"))
const port = freePort()
const url = `http://127.0.0.1:${port}`
const env = { ...embeddedEnvironment(dataDir, port, 2_000), HOST: "127.0.0.1", RATE_LIMIT_ENABLED: "false" }
const { child, output: banner } = await startUntilBanner(env, [process.execPath, join(root, "src/main.ts")], root)
try {
  // Keep draining both pipes: a full pipe would stall the server.
  void (async () => {
    const reader = child.stdout.getReader()
    while (!(await reader.read()).done) continue
  })()
  void new Response(child.stderr).text()
  const key = /demo API key:\s+(\S+)/.exec(banner)![1]
  const accountId = /demo account:\s+(\S+)/.exec(banner)![1]
  const adminToken = /admin token:\s+(\S+)/.exec(banner)![1]
  const grant = await fetch(`${url}/admin/accounts/${accountId}/credits`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ bucket: "topup", amount: 100_000_000, reason: "bench" })
  })
  if (grant.status !== 200) throw new Error(`grant: ${grant.status} ${await grant.text()}`)
  const headers = { authorization: `Bearer ${key}` }
  const rows = [
    { name: "wallet", requests: [{ path: "/v1/wallet", headers }] },
    { name: "search", requests: ["money", "routine", "morning", "secret"].map((q) => ({ path: `/v1/hooks/search?q=${q}`, headers })) }
  ]
  console.log(`embedded database, ${values.connections} connections, ${values.seconds} s a row, root ${root}`)
  for (const row of rows) {
    const result = await runHttpLoad({
      url,
      requests: row.requests,
      concurrency: Number(values.connections),
      warmupMs: 2_000,
      durationMs: Number(values.seconds) * 1000,
      serverPid: child.pid
    })
    console.log(`${row.name.padEnd(7)} ${result.throughput.toFixed(0).padStart(6)} req/s  p50 ${result.p50Ms.toFixed(1)} ms  ` +
      `p99 ${result.p99Ms.toFixed(1)} ms  errors ${result.errors}  CPU ${result.cpuMsPerRequest?.toFixed(3) ?? "?"} ms/req (${result.generator})`)
  }
} finally {
  child.kill("SIGTERM")
  await child.exited
  rmSync(dataDir, { recursive: true, force: true })
}
