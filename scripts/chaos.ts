/**
 * `npm run chaos`: Hookline under metered load while its dependencies go away and come back,
 * on a PostgreSQL and a Redis of its own (temporary, on free ports; the shared servers are not
 * touched). Needs the PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin, or PG_BIN)
 * and redis-server.
 *
 * 1. PostgreSQL: stopped hard (`pg_ctl stop -m immediate`) OUTAGE_AT seconds in, started again
 *    OUTAGE_SECONDS later, OUTAGES times. Prints the answers by status, whether every 503 carried
 *    Retry-After, the time from the database accepting connections again to every client having
 *    a 2xx answer, and the ledger check (wallets against the journal, holds past their expiry).
 * 2. Redis (the shared rate limit store): frozen (SIGSTOP), then killed, OUTAGE_SECONDS each.
 *    Prints the answers by status and how many took longer than SLOW_MS.
 *
 * Settings (environment): CLIENTS (16), OUTAGES (2), OUTAGE_AT (8), OUTAGE_SECONDS (4), SLOW_MS (500).
 */
import { startOwnPostgres, startOwnRedis } from "../test/support/cluster.js"
import { byStatus, checkLedger, type Load, recoveryMs, startLoad, waitFor } from "../test/support/outage.js"
import { adminClient, deployment, spawnServer } from "../test/support/process.js"
import { testPool } from "../test/support/server.js"

const setting = (name: string, fallback: number) => Number(process.env[name] ?? fallback)
const clients = setting("CLIENTS", 16)
const outages = setting("OUTAGES", 2)
const outageAtMs = setting("OUTAGE_AT", 8) * 1000
const outageMs = setting("OUTAGE_SECONDS", 4) * 1000
const slowMs = setting("SLOW_MS", 500)

const summary = (load: Load) => {
  const unavailable = load.answers.filter((answer) => answer.status === 503)
  const durations = load.answers.map((answer) => answer.durationMs).sort((a, b) => a - b)
  return {
    answers: load.answers.length,
    by_status: byStatus(load.answers),
    "503_without_retry_after": unavailable.filter((answer) => answer.retryAfter === null).length,
    p99_ms: Math.round(durations[Math.floor(durations.length * 0.99)] ?? 0),
    max_ms: Math.round(durations.at(-1) ?? 0),
    [`slower_than_${slowMs}ms`]: durations.filter((duration) => duration > slowMs).length
  }
}

const accountsFor = async (server: Awaited<ReturnType<typeof spawnServer>>, adminToken: string) => {
  await server.request("/admin/catalog/categories", { method: "PUT", key: adminToken, body: [{ slug: "fitness", name: "Fitness" }] })
  await server.request("/admin/catalog/hooks", {
    method: "POST",
    key: adminToken,
    rawBody: Array.from({ length: 60 }, (_, i) =>
      JSON.stringify({ text: `opening hook number ${i}`, platform: "tiktok", source_url: `https://tiktok.example/${i}`, category: "fitness" }))
      .join("\n"),
    headers: { "content-type": "application/x-ndjson" }
  })
  const admin = adminClient(server, adminToken)
  return Promise.all(Array.from({ length: clients }, () => admin.account({ monthly_balance: 0, topup_balance: 1_000_000 })))
}

const postgresScenario = async () => {
  const pg = await startOwnPostgres()
  const shared = deployment(pg.url)
  const server = await spawnServer({ deployment: shared, env: { HOLD_TIMEOUT: "5 seconds", LEDGER_SWEEP_INTERVAL: "1 second" } })
  const db = testPool(pg.url, 2)
  try {
    const accounts = await accountsFor(server, shared.adminToken)
    const load = startLoad(server, accounts.map((account) => account.key))
    const recoveries: Array<number | null> = []
    for (let outage = 0; outage < outages; outage++) {
      await Bun.sleep(outageAtMs)
      await pg.stopHard()
      await Bun.sleep(outageMs)
      await pg.start()
      const back = Date.now()
      await waitFor("every client answered again", 30_000, async () => recoveryMs(load.answers, back, accounts.length) !== null).catch(() => 0)
      recoveries.push(recoveryMs(load.answers, back, accounts.length))
    }
    await Bun.sleep(outageAtMs)
    await load.stop()
    const alive = server.child.exitCode === null
    const sweptMs = await waitFor("holds past expiry swept", 60_000, async () => (await checkLedger(db)).pendingPastExpiry === 0).catch(() => null)
    return {
      scenario: `PostgreSQL stopped hard ${outages} times for ${outageMs / 1000} s, ${clients} clients`,
      process_alive: alive,
      ...summary(load),
      recovery_ms: recoveries.map((ms) => (ms === null ? "never" : Math.round(ms))),
      ledger: { ...(await checkLedger(db)), swept_after_load_ms: sweptMs }
    }
  } finally {
    server.kill("SIGTERM")
    await server.exited
    await db.end()
    await pg.destroy()
  }
}

const redisScenario = async () => {
  const pg = await startOwnPostgres()
  const redis = await startOwnRedis()
  const shared = deployment(pg.url)
  const server = await spawnServer({
    deployment: shared,
    env: { REDIS_URL: redis.url, RATE_LIMIT_ENABLED: "true", RATE_LIMIT_PRO: "1000/2000" }
  })
  try {
    const accounts = await accountsFor(server, shared.adminToken)
    const load = startLoad(server, accounts.map((account) => account.key))
    const readiness: Array<string> = []
    for (const outage of ["freeze", "kill"] as const) {
      await Bun.sleep(outageAtMs / 2)
      if (outage === "freeze") redis.freeze()
      else await redis.kill()
      await Bun.sleep(outageMs / 2)
      readiness.push(`${outage}: ${JSON.stringify((await server.request("/readyz")).body)}`)
      await Bun.sleep(outageMs / 2)
      if (outage === "freeze") redis.resume()
      else await redis.start()
    }
    await Bun.sleep(outageAtMs / 2)
    await load.stop()
    return {
      scenario: `Redis frozen then killed, ${outageMs / 1000} s each, ${clients} clients`,
      process_alive: server.child.exitCode === null,
      ...summary(load),
      readyz_during: readiness,
      readyz_after: (await server.request("/readyz")).body
    }
  } finally {
    server.kill("SIGTERM")
    await server.exited
    await redis.destroy()
    await pg.destroy()
  }
}

console.log(JSON.stringify(await postgresScenario(), null, 2))
console.log(JSON.stringify(await redisScenario(), null, 2))
