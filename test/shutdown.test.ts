/**
 * Graceful shutdown of a real `bun src/main.ts` process: on SIGTERM it refuses new requests
 * with 503 service_unavailable, lets the request in flight finish with 200, hands its running
 * prediction job back to the queue, flushes its traces, and exits 0. A request still running
 * when the grace period ends is cut off, and the process still exits 0.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import Pg from "pg"
import { adminClient, type Deployment, deployment, gatedProbe, type GatedProbe, smallClip, spawnServer, submitClip } from "./support/process.js"
import { eventually, type Receiver, startReceiver } from "./support/receiver.js"
import {
  adminDatabaseUrl,
  createDatabase,
  dropDatabase,
  type ErrorBody,
  startTestServer,
  testPool,
  type WebhookTestBody
} from "./support/server.js"

let databaseUrl: string
let shared: Deployment
let db: Pg.Pool
let clip: Uint8Array<ArrayBuffer>
let probe: GatedProbe
const receivers: Array<Receiver> = []

beforeAll(async () => {
  ;[databaseUrl, clip] = await Promise.all([createDatabase(), smallClip()])
  shared = deployment(databaseUrl)
  db = testPool(databaseUrl, 2)
  probe = gatedProbe()
})
afterAll(async () => {
  probe.open()
  await Promise.all(receivers.map((r) => r.stop()))
  await db.end()
  await dropDatabase(databaseUrl)
})

const receiver = () => {
  const r = startReceiver()
  receivers.push(r)
  return r
}

const predictionStatus = async (id: string) =>
  (await db.query<{ status: string; attempts: number; claimed_by: string | null }>(
    "SELECT status, attempts, claimed_by FROM predictions WHERE id = $1",
    [id]
  )).rows[0]

describe("graceful shutdown", () => {
  test("SIGTERM: new requests get 503, the one in flight finishes with 200, the running job goes back to queued, traces are flushed, exit 0", async () => {
    const hooks = receiver()
    const collector = startReceiver("/")
    receivers.push(collector)
    const server = await spawnServer({
      deployment: shared,
      env: {
        LOG_LEVEL: "Info",
        SHUTDOWN_GRACE_PERIOD: "30 seconds",
        WEBHOOK_ALLOW_PRIVATE: "true",
        WEBHOOK_ALLOW_INSECURE: "true",
        FFPROBE_PATH: probe.path,
        WORKER_CONCURRENCY: "1",
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
        OTEL_TRACES_SAMPLER: "always_on",
        // Only the shutdown flush exports: nothing is sent on a timer during the test.
        OTEL_EXPORT_INTERVAL: "1 hour"
      }
    })
    const { key } = await adminClient(server, shared.adminToken).account({ monthly_balance: 100 })
    expect((await server.request("/v1/webhooks", { method: "PUT", key, body: { url: hooks.url } })).status).toBe(200)

    // A job held in `running` by the gated ffprobe.
    const { predictionId } = await submitClip(server, key, clip)
    await eventually("the job is running", async () => (await predictionStatus(predictionId))?.status === "running")

    // A slow request in flight: the synchronous test delivery waits for the receiver's answer.
    hooks.hang(true)
    const inFlight = server.request<WebhookTestBody>(
      "/v1/webhooks/test",
      { method: "POST", key }
    )
    await eventually("the test delivery reached the receiver", () => hooks.requests.length === 1)

    server.kill("SIGTERM")

    // New requests are refused with the envelope while the one in flight runs.
    const refused = await eventually("a new request is refused", async () => {
      const answer = await server.request<ErrorBody>("/v1/wallet", { key })
      return answer.status === 200 ? undefined : answer
    })
    expect(refused.status).toBe(503)
    expect(refused.body.error.type).toBe("service_unavailable")
    expect(refused.body.error.request_id).toBe(refused.headers.get("x-request-id")!)
    expect(refused.headers.get("x-request-id")).toMatch(/^req_/)

    // The worker was interrupted: its job is back in the queue, the attempt not counted.
    await eventually("the job is queued again", async () => (await predictionStatus(predictionId))?.status === "queued")
    expect(await predictionStatus(predictionId)).toEqual({ status: "queued", attempts: 0, claimed_by: null })

    // The request in flight completes normally once the receiver answers.
    hooks.hang(false)
    const finished = await inFlight
    expect(finished.status).toBe(200)
    expect(finished.body).toMatchObject({ object: "webhook_test", delivered: false, status_code: 503 })

    expect(await server.exited).toBe(0)
    expect(server.output()).toContain("shutting down: refusing new requests, finishing those in flight")
    expect(server.output()).not.toContain("grace period over")

    // The spans of the requests served were exported by the shutdown flush.
    const traces = collector.requests.filter((r) => r.path === "/v1/traces")
    expect(traces.length).toBeGreaterThanOrEqual(1)
    expect(traces.map((r) => r.body).join("\n")).toContain("/v1/webhooks/test")

    // The next process picks the handed-back job up and finishes it.
    probe.open()
    const next = await spawnServer({ deployment: shared, env: { FFPROBE_PATH: probe.path } })
    try {
      await eventually("the job succeeds in the next process", async () => (await predictionStatus(predictionId))?.status === "succeeded")
      const { rows } = await db.query<{ attempts: number }>("SELECT attempts FROM predictions WHERE id = $1", [predictionId])
      expect(rows[0].attempts).toBe(1)
    } finally {
      next.kill("SIGTERM")
      expect(await next.exited).toBe(0)
    }
  }, 60_000)

  test("a request still running when the grace period ends is cut off, and the process still exits 0", async () => {
    const hooks = receiver()
    const server = await spawnServer({
      deployment: shared,
      env: {
        LOG_LEVEL: "Info",
        SHUTDOWN_GRACE_PERIOD: "300 millis",
        WEBHOOK_ALLOW_PRIVATE: "true",
        WEBHOOK_ALLOW_INSECURE: "true",
        WEBHOOK_TIMEOUT: "60s"
      }
    })
    const { key } = await adminClient(server, shared.adminToken).account({ monthly_balance: 100 })
    expect((await server.request("/v1/webhooks", { method: "PUT", key, body: { url: hooks.url } })).status).toBe(200)
    hooks.hang(true)
    const inFlight = fetch(`${server.url}/v1/webhooks/test`, { method: "POST", headers: { authorization: `Bearer ${key}` } })
      .then((r) => r.status, () => "connection closed" as const)
    await eventually("the test delivery reached the receiver", () => hooks.requests.length === 1)

    server.kill("SIGINT")
    expect(await server.exited).toBe(0)
    // The receiver never answered: the request was cut off (503 from the server, or the connection closed).
    expect([503, "connection closed"]).toContain(await inFlight)
    expect(server.output()).toContain("grace period over: interrupting the requests still running")
    hooks.hang(false)
  }, 60_000)
})

describe("a metered request cut off by the grace period", () => {
  test("is interrupted and refunds its hold before the process exits", async () => {
    const server = await spawnServer({
      deployment: shared,
      env: { LOG_LEVEL: "Info", SHUTDOWN_GRACE_PERIOD: "300 millis", SEARCH_TIMEOUT: "60 seconds", DB_STATEMENT_TIMEOUT: "60 seconds" }
    })
    const { accountId, key } = await adminClient(server, shared.adminToken).account({ monthly_balance: 100 })
    // The search reserves its credits, then waits on the catalog, locked by this transaction.
    const locker = await db.connect()
    await locker.query("BEGIN")
    await locker.query("LOCK TABLE hooks IN ACCESS EXCLUSIVE MODE")
    let released = false
    const release = async () => {
      if (released) return
      released = true
      await locker.query("ROLLBACK")
      locker.release()
    }
    try {
      const search = fetch(`${server.url}/v1/hooks/search?q=money`, { headers: { authorization: `Bearer ${key}` } })
        .then((r) => r.status, () => "connection closed" as const)
      await eventually("the search holds its credits", async () =>
        (await db.query("SELECT 1 FROM holds WHERE account_id = $1 AND status = 'pending'", [accountId])).rowCount === 1)

      server.kill("SIGTERM")
      await eventually("the grace period ended", () => server.output().includes("grace period over"))
      // The lock outlives the request: what ends the request is the shutdown, not the catalog.
      setTimeout(() => void release(), 3_000)
      expect(await server.exited).toBe(0)
      expect([503, "connection closed"]).toContain(await search)
      const { rows } = await db.query<{ status: string }>("SELECT status FROM holds WHERE account_id = $1", [accountId])
      expect(rows.map((row) => row.status)).toEqual(["refunded"])
      const journal = await db.query<{ entry_type: string; amount: string }>(
        "SELECT entry_type, amount FROM credit_journal WHERE account_id = $1 AND hold_id IS NOT NULL ORDER BY seq",
        [accountId]
      )
      expect(journal.rows.map((row) => [row.entry_type, Number(row.amount)])).toEqual([["reserve", -2], ["release", 2]])
    } finally {
      await release()
    }
  }, 60_000)
})

describe("stopping right after start", () => {
  test("leaves no database connection behind (the LISTEN connections included)", async () => {
    const databaseUrl = await createDatabase()
    const observer = testPool(adminDatabaseUrl, 1)
    try {
      const sessions = async () =>
        (await observer.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1", [
          new URL(databaseUrl).pathname.slice(1)
        ])).rows[0].n
      for (let round = 0; round < 3; round++) {
        const server = await startTestServer({}, { databaseUrl })
        await server.stop()
        await server.db.end()
      }
      // Connections close as their pools end; give a slow machine a moment, then there must be none.
      const deadline = Date.now() + 5_000
      while ((await sessions()) > 0 && Date.now() < deadline) await Bun.sleep(50)
      expect(await sessions()).toBe(0)
    } finally {
      await observer.end()
      await dropDatabase(databaseUrl)
    }
  })
})
