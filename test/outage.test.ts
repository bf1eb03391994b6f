/**
 * Dependencies that go away and come back, under metered load from several clients, against a
 * real server process: its own PostgreSQL (stopped hard and started again) and its own Redis
 * (frozen, then killed, and started again), so the shared servers are never disturbed. And an
 * error nothing in the process handles, which must not end it.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { join } from "node:path"
import { type OwnPostgres, type OwnRedis, startOwnPostgres, startOwnRedis } from "./support/cluster.js"
import { byStatus, chargesAgainstJournal, checkLedger, type Load, recoveryMs, startLoad, waitFor } from "./support/outage.js"
import { adminClient, deployment, type ServerProcess, spawnServer } from "./support/process.js"
import { startReceiver } from "./support/receiver.js"
import { createDatabase, dropDatabase, type ErrorBody, testPool } from "./support/server.js"

const cleanups: Array<() => Promise<unknown>> = []
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {})
})

const started = async (options: Parameters<typeof spawnServer>[0]): Promise<ServerProcess> => {
  const server = await spawnServer(options)
  cleanups.push(async () => {
    server.kill("SIGKILL")
    await server.exited
  })
  return server
}

/** A catalog whose hooks match the load's searches, so they charge credits. */
const importHooks = async (server: ServerProcess, adminToken: string) => {
  await server.request("/admin/catalog/categories", { method: "PUT", key: adminToken, body: [{ slug: "fitness", name: "Fitness" }] })
  const imported = await server.request("/admin/catalog/hooks", {
    method: "POST",
    key: adminToken,
    rawBody: Array.from({ length: 30 }, (_, i) =>
      JSON.stringify({ text: `opening hook number ${i}`, platform: "tiktok", source_url: `https://tiktok.example/${i}`, category: "fitness" }))
      .join("\n"),
    headers: { "content-type": "application/x-ndjson" }
  })
  expect(imported.body).toMatchObject({ inserted: 30, rejected_count: 0 })
}

/** What every answer of a load must be: some HTTP answer, never a 5xx other than a 503 with Retry-After. */
const expectOnlyHonestAnswers = (load: Load) => {
  const counts = byStatus(load.answers)
  expect(counts["0"]).toBeUndefined()
  expect(counts["500"]).toBeUndefined()
  const unavailable = load.answers.filter((answer) => answer.status === 503)
  expect(unavailable.filter((answer) => answer.errorType !== "service_unavailable" || answer.retryAfter === null)).toEqual([])
  expect(load.answers.filter((answer) => answer.status >= 500 && answer.status !== 503)).toEqual([])
}

describe("PostgreSQL stopped hard and started again", () => {
  let pg: OwnPostgres
  test("503 with Retry-After while it is away, answers again without a restart, nothing lost", async () => {
    pg = await startOwnPostgres()
    cleanups.push(() => pg.destroy())
    const shared = deployment(pg.url)
    const metricsToken = "metrics-token-for-the-postgres-outage-test"
    const server = await started({
      deployment: shared,
      env: {
        METRICS_TOKEN: metricsToken,
        HOLD_TIMEOUT: "3 seconds",
        LEDGER_SWEEP_INTERVAL: "500 millis",
        // Only LISTEN can wake the dispatcher in time: a delivery after the outage proves it was taken again.
        WEBHOOK_POLL_INTERVAL: "10m",
        WEBHOOK_ALLOW_PRIVATE: "true",
        WEBHOOK_ALLOW_INSECURE: "true"
      }
    })
    await importHooks(server, shared.adminToken)
    const admin = adminClient(server, shared.adminToken)
    const opening = 100_000
    const clients = await Promise.all(Array.from({ length: 6 }, () => admin.account({ monthly_balance: 0, topup_balance: opening })))
    const outcomeUnknownCount = async () => {
      const scraped = await server.request<string>("/metrics", { key: metricsToken })
      return Number(/^hookline_outcome_unknown_total(?:\{[^}]*\})? (\d+)/m.exec(scraped.body)?.[1] ?? 0)
    }
    const unknownBefore = await outcomeUnknownCount()
    const receiver = startReceiver()
    cleanups.push(() => receiver.stop())
    const alerted = await admin.account({ monthly_balance: 0, topup_balance: 10 })
    expect((await server.request("/v1/webhooks", { method: "PUT", key: alerted.key, body: { url: receiver.url } })).status).toBe(200)
    expect((await server.request("/v1/wallet/alert", { method: "PUT", key: alerted.key, body: { threshold: 5 } })).status).toBe(200)

    const load = startLoad(server, clients.map((client) => client.key))
    await waitFor("answers before the outage", 10_000, async () => load.answers.some((answer) => answer.status === 200))

    await pg.stopHard()
    const down = Date.now()
    await waitFor("503 answers during the outage", 10_000, async () =>
      load.answers.filter((answer) => answer.startedAt > down && answer.status === 503).length >= 30)
    const ready = await server.request<ErrorBody>("/readyz")
    expect(ready.status).toBe(503)
    expect(ready.body.error.message).toContain("cannot be reached")
    expect(ready.headers.get("retry-after")).not.toBeNull()
    expect((await server.request("/healthz")).status).toBe(200)

    await pg.start()
    const back = Date.now()
    await waitFor("every client answered 2xx again", 5_000, async () => recoveryMs(load.answers, back, clients.length) !== null)
    await waitFor("/readyz answers 200 again", 5_000, async () => (await server.request("/readyz")).status === 200)
    await load.stop()

    expect(server.child.exitCode).toBeNull()
    expectOnlyHonestAnswers(load)

    // The webhook dispatcher hears of a new delivery through its LISTEN, taken again by itself.
    const db = testPool(pg.url, 2)
    cleanups.push(() => db.end())
    const hooks = await db.query<{ id: string }>("SELECT id FROM hooks LIMIT 6")
    for (const { id } of hooks.rows) expect((await server.request(`/v1/hooks/${id}`, { key: alerted.key })).status).toBe(200)
    await waitFor("the low-balance webhook delivered", 15_000, async () =>
      receiver.requests.some((request) => request.body.includes("wallet.low_balance")))

    // Holds the outage interrupted are voided by the sweeper once expired; every wallet equals its journal.
    await waitFor("no hold pending past its expiry", 15_000, async () => (await checkLedger(db)).pendingPastExpiry === 0)
    const ledger = await checkLedger(db)
    expect(ledger.unequal).toBe(0)
    expect(ledger.accounts).toBeGreaterThanOrEqual(7)
    // What the answers said they charged is what the journal took, request by request; no 503
    // carries a charge. A request the journal took from without a 200 had an unknown outcome for
    // its client (no answer, or a 503 saying so): counted, and the 503s among them said it.
    // A hold the outage left pending is voided once it expires (its reserve given back): wait for all of them.
    await waitFor("no hold pending", 15_000, async () => (await checkLedger(db)).pending === 0)
    const accountIds = clients.map((client) => client.accountId)
    const charges = await chargesAgainstJournal(db, accountIds, load.answers)
    expect(charges.mismatched).toEqual([])
    expect(charges.charged503).toEqual([])
    expect(load.answers.filter((answer) => answer.status !== 200 && answer.charged !== 0)).toEqual([])
    const unknown = charges.unaccounted.map((row) => load.answers.find((answer) => answer.requestId === row.request_id))
    expect(unknown.filter((answer) => answer !== undefined && !(answer.errorMessage ?? "").includes("outcome is unknown"))).toEqual([])
    // In all: what left the wallets is what the answers said they charged, plus what requests of
    // unknown outcome took; those answered are the ones the server counted.
    const { rows: [balances] } = await db.query<{ left: number }>(
      "SELECT ($2::bigint * count(*) - sum(monthly_balance + topup_balance))::int AS left FROM wallets WHERE account_id = ANY($1)",
      [accountIds, opening]
    )
    const unknownTaken = charges.unaccounted.reduce((sum, row) => sum + row.taken, 0)
    const answeredCharged = load.answers.reduce((sum, answer) => sum + answer.charged, 0)
    expect(balances.left).toBe(answeredCharged + unknownTaken)
    const answeredUnknown = load.answers.filter((answer) => answer.status === 503 && (answer.errorMessage ?? "").includes("outcome is unknown"))
    expect(await outcomeUnknownCount()).toBe(unknownBefore + answeredUnknown.length)
    console.log(`outage: ${load.answers.length} answers, ${answeredCharged} credits answered as charged, ${balances.left} left the ` +
      `wallets, ${charges.unaccounted.length} requests of unknown outcome (${answeredUnknown.length} answered so) took ${unknownTaken}`)
  }, 120_000)
})

describe("Redis frozen, then killed, and started again", () => {
  let redis: OwnRedis
  test("requests never wait on it, /readyz says degraded, limits shared again once it answers", async () => {
    redis = await startOwnRedis()
    cleanups.push(() => redis.destroy())
    const databaseUrl = await createDatabase()
    cleanups.push(() => dropDatabase(databaseUrl))
    const shared = deployment(databaseUrl)
    const metricsToken = "metrics-token-for-the-outage-test"
    const server = await started({
      deployment: shared,
      env: {
        REDIS_URL: redis.url,
        RATE_LIMIT_ENABLED: "true",
        // High enough that the load is not limited; the check at the end uses the enterprise tier.
        RATE_LIMIT_PRO: "1000/2000",
        RATE_LIMIT_ENTERPRISE: "1/3",
        METRICS_TOKEN: metricsToken
      }
    })
    await importHooks(server, shared.adminToken)
    const admin = adminClient(server, shared.adminToken)
    const clients = await Promise.all(Array.from({ length: 6 }, () => admin.account({ monthly_balance: 0, topup_balance: 100_000 })))
    const fallbackGauge = async () => {
      const scraped = await server.request<string>("/metrics", { key: metricsToken })
      return /^hookline_rate_limit_store_fallback(?:\{[^}]*\})? (\d+)/m.exec(scraped.body)?.[1]
    }
    const readiness = async () => (await server.request<{ status: string; degraded?: Array<string> }>("/readyz"))

    const load = startLoad(server, clients.map((client) => client.key))
    await waitFor("answers before the outage", 10_000, async () => load.answers.some((answer) => answer.status === 200))
    expect(await fallbackGauge()).toBe("0")

    for (const outage of ["freeze", "kill"] as const) {
      if (outage === "freeze") redis.freeze()
      else await redis.kill()
      const down = Date.now()
      await waitFor(`/readyz degraded (${outage})`, 5_000, async () => (await readiness()).body.status === "degraded")
      const ready = await readiness()
      expect(ready.status).toBe(200)
      expect(ready.body.degraded?.[0]).toContain("rate_limit_store")
      expect(await fallbackGauge()).toBe("1")
      await waitFor(`answers while Redis is away (${outage})`, 10_000, async () =>
        load.answers.filter((answer) => answer.startedAt > down && answer.status === 200).length >= 100)
      if (outage === "freeze") redis.resume()
      else await redis.start()
      await waitFor(`/readyz ok again (${outage})`, 10_000, async () => (await readiness()).body.status === "ok")
      expect(await fallbackGauge()).toBe("0")
    }
    await load.stop()

    expect(server.child.exitCode).toBeNull()
    expectOnlyHonestAnswers(load)
    expect(byStatus(load.answers)["200"]).toBe(load.answers.length)
    // The deadline is 100 ms and these routes take milliseconds: a request that waited on Redis
    // (2 s connection timeout, or forever on the frozen server) would be far past a second.
    const slow = load.answers.filter((answer) => answer.durationMs > 1_000)
    expect(slow.length).toBeLessThanOrEqual(5)

    // Limits are counted in Redis again: a burst of 3 is enforced, and Redis holds the counter.
    const limited = await admin.account({ plan: "enterprise", monthly_balance: 0, topup_balance: 100 })
    const statuses: Array<number> = []
    for (let i = 0; i < 6; i++) statuses.push((await server.request("/v1/wallet", { key: limited.key })).status)
    expect(statuses.filter((status) => status === 200).length).toBeLessThanOrEqual(4)
    expect(statuses).toContain(429)
    const stored = Bun.spawn(["redis-cli", "-u", redis.url, "--scan", "--pattern", `hookline:ratelimit:key:${limited.keyId}*`], { stdout: "pipe" })
    expect((await new Response(stored.stdout).text()).trim()).not.toBe("")
  }, 120_000)
})

describe("an error nothing handles", () => {
  test("is logged as a defect and the process keeps serving", async () => {
    const databaseUrl = await createDatabase()
    cleanups.push(() => dropDatabase(databaseUrl))
    const server = await started({
      deployment: deployment(databaseUrl),
      env: { BUN_OPTIONS: `--preload ${join(import.meta.dir, "support", "forceUnhandled.ts")}` }
    })
    server.child.kill("SIGUSR2")
    await waitFor("the three failures logged", 10_000, async () =>
      ["forced: an 'error' event", "forced: a throw in a timer", "forced: a rejection nobody handles"].every((text) => server.output().includes(text)))
    expect(server.output()).toContain("uncaught exception; the process keeps serving")
    expect(server.output()).toContain("unhandled promise rejection; the process keeps serving")
    expect((await server.request("/healthz")).status).toBe(200)
    expect((await server.request("/readyz")).status).toBe(200)
    expect(server.child.exitCode).toBeNull()
  }, 60_000)
})
