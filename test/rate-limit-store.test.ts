/**
 * The shared rate limit store (Redis) and its local fallback, on a Redis of the test's own behind
 * a proxy that can make the server's connection go silent: local counting starts only after
 * several failed or late calls in a row (not after one, nor after a burst of calls late together),
 * /readyz and a gauge say which mode the process is in, and recovery is found on a fresh
 * connection, so a silent one does not keep the process counting locally.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { type OwnRedis, startOwnRedis } from "./support/cluster.js"
import { waitFor } from "./support/outage.js"
import { type SilentProxy, startSilentProxy } from "./support/silentProxy.js"
import { startTestServer, type TestServer } from "./support/server.js"

const metricsToken = "metrics-token-for-the-rate-limit-store-test"
const failuresInARow = 3

let redis: OwnRedis
let proxy: SilentProxy
let base: TestServer

beforeAll(async () => {
  redis = await startOwnRedis()
  proxy = await startSilentProxy({ host: "127.0.0.1", port: Number(new URL(redis.url).port) })
  base = await startTestServer({}, { background: false })
})
afterAll(async () => {
  await base.close()
  await proxy.stop()
  await redis.destroy()
})

/**
 * A server counting limits in the test's Redis through the proxy. A pro key's burst is more than
 * the traffic here, and refills so slowly (one request per 100 s) that its counter stays in Redis.
 */
const serverOnRedis = (env: Record<string, string> = {}) =>
  startTestServer({
    REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
    RATE_LIMIT_ENABLED: "true",
    RATE_LIMIT_PRO: "0.01/2000",
    RATE_LIMIT_STORE_FAILURES: String(failuresInARow),
    // Late means frozen or silent here: a loaded machine still answers well within a second.
    RATE_LIMIT_STORE_TIMEOUT: "1 second",
    METRICS_TOKEN: metricsToken,
    ...env
  }, { databaseUrl: base.databaseUrl, background: false })

const readiness = async (server: TestServer) =>
  (await server.request<{ status: string; degraded?: Array<string>; rate_limit_store: string }>("/readyz")).body

/** The fallback gauge and the count of switches to it, as /metrics shows them. */
const scrape = async (server: TestServer) => {
  const text = (await server.request<string>("/metrics", { key: metricsToken })).body
  const sample = (name: string) => new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)`, "m").exec(text)?.[1]
  // The counter appears with its first switch.
  return { fallback: Number(sample("hookline_rate_limit_store_fallback")), switches: Number(sample("hookline_rate_limit_store_fallbacks_total") ?? 0) }
}

/** The keys Redis holds for a rate-limit key id. */
const storedCounters = async (keyId: string) => {
  const scan = Bun.spawn(["redis-cli", "-u", redis.url, "--scan", "--pattern", `hookline:ratelimit:key:${keyId}*`], { stdout: "pipe" })
  return (await new Response(scan.stdout).text()).trim()
}

describe("switching to local counting", () => {
  test("calls late together (a burst while Redis is frozen) count once: the process keeps counting in Redis", async () => {
    // A long deadline, so every call of the burst is surely under way before the first is found late.
    const server = await serverOnRedis({ RATE_LIMIT_STORE_TIMEOUT: "2 seconds" })
    try {
      const { key } = await server.account()
      expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      const before = await scrape(server)
      expect(await readiness(server)).toEqual({ status: "ok", rate_limit_store: "redis" })

      redis.freeze()
      let burst: Array<number>
      try {
        burst = (await Promise.all(Array.from({ length: 12 }, () => server.request("/v1/wallet", { key })))).map((answer) => answer.status)
      } finally {
        redis.resume()
      }
      // Each call was late and answered from the process's own store; the requests were served.
      expect(burst).toEqual(Array<number>(12).fill(200))
      expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      expect(await readiness(server)).toEqual({ status: "ok", rate_limit_store: "redis" })
      expect(await scrape(server)).toEqual({ fallback: 0, switches: before.switches })
    } finally {
      await server.stop()
    }
  })

  test(`one late call does not switch; ${failuresInARow} in a row do, and /readyz and the gauge say so until Redis answers`, async () => {
    const server = await serverOnRedis()
    try {
      const { key } = await server.account()
      expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      const before = await scrape(server)

      // One late call, then Redis answers again: the streak ends.
      redis.freeze()
      try {
        expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      } finally {
        redis.resume()
      }
      expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      expect((await readiness(server)).rate_limit_store).toBe("redis")

      redis.freeze()
      try {
        const modes: Array<string> = []
        for (let i = 0; i < failuresInARow; i++) {
          expect((await server.request("/v1/wallet", { key })).status).toBe(200)
          modes.push((await readiness(server)).rate_limit_store)
        }
        expect(modes).toEqual([...Array<string>(failuresInARow - 1).fill("redis"), "local_fallback"])
        const ready = await readiness(server)
        expect(ready.status).toBe("degraded")
        expect(ready.degraded?.[0]).toContain("rate_limit_store")
        expect(await scrape(server)).toEqual({ fallback: 1, switches: before.switches + 1 })
        // Counting locally, requests no longer go to the frozen Redis: they are answered.
        expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      } finally {
        redis.resume()
      }
      await waitFor("limits shared again once Redis answers", 15_000, async () => (await readiness(server)).rate_limit_store === "redis")
      expect(await readiness(server)).toEqual({ status: "ok", rate_limit_store: "redis" })
      expect((await scrape(server)).fallback).toBe(0)
    } finally {
      await server.stop()
    }
  })
})

test("a connection gone silent: recovery is found on a fresh connection, and limits are counted in Redis again", async () => {
  const server = await serverOnRedis()
  try {
    const { key } = await server.account()
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)

    const before = await scrape(server)

    // The server's connection to Redis now swallows everything; Redis itself is fine.
    proxy.silenceOpenConnections()
    for (let i = 0; i < failuresInARow; i++) expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    // The switch is read from its counter: the mode itself may already be back to "redis", since
    // the probe finds Redis answering on a fresh connection as soon as it next runs.
    expect((await scrape(server)).switches).toBe(before.switches + 1)

    await waitFor("limits shared again on a new connection", 15_000, async () => (await readiness(server)).rate_limit_store === "redis")
    const fresh = await server.account()
    for (let i = 0; i < 3; i++) expect((await server.request("/v1/wallet", { key: fresh.key })).status).toBe(200)
    expect(await storedCounters(fresh.keyId)).not.toBe("")
    expect(await readiness(server)).toEqual({ status: "ok", rate_limit_store: "redis" })
  } finally {
    await server.stop()
  }
})

test("without REDIS_URL /readyz says limits are counted in process", async () => {
  expect(await readiness(base)).toEqual({ status: "ok", rate_limit_store: "memory" })
})
