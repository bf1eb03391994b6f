/**
 * Clients behind a proxy (TRUST_PROXY): a trusted peer's forwarded address is the client's for
 * the failed-authentication limit and the access log; an untrusted peer's forwarding headers are
 * ignored. The proxy is a connection from 127.0.0.1, the stranger one from 127.0.0.2.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Logger } from "effect"
import { ClientAddressConfig, makeClientAddress } from "../src/System/ClientAddress.js"
import { expectEnvelope } from "./support/envelope.js"
import { answerFrom, requestFrom } from "./support/peer.js"
import { startTestServer, type TestServer } from "./support/server.js"

const wrongKey = { authorization: `Bearer hkl_live_${"x".repeat(32)}` }
const limit = 3

let base: TestServer

beforeAll(async () => {
  base = await startTestServer({}, { background: false })
})
afterAll(() => base.close())

/** A server on the shared database with the failed-authentication limit at `limit` and `env` on top. */
const limitedServer = (env: Record<string, string>, options: Parameters<typeof startTestServer>[1] = {}) =>
  startTestServer(
    { RATE_LIMIT_ENABLED: "true", RATE_LIMIT_FAILED_AUTH_PER_MINUTE: String(limit), ...env },
    { databaseUrl: base.databaseUrl, background: false, ...options }
  )

/** `count` failed authentications from `peer` with `headers` on top; their statuses. */
const failFrom = async (server: TestServer, peer: string, count: number, headers: Record<string, string> = {}) => {
  const statuses: Array<number> = []
  for (let i = 0; i < count; i++) statuses.push(await requestFrom(peer, server.url, "/v1/wallet", { ...wrongKey, ...headers }))
  return statuses
}

const refusedThenLimited = [...Array<number>(limit).fill(401), 429]

describe("TRUST_PROXY with the proxy's address", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await limitedServer({ TRUST_PROXY: "127.0.0.1" })
  })
  afterAll(() => server.stop())

  test("each forwarded client has its own failed-authentication count; the proxy's own address is not limited", async () => {
    expect(await failFrom(server, "127.0.0.1", limit + 1, { "x-forwarded-for": "203.0.113.5" })).toEqual(refusedThenLimited)
    const limited = await answerFrom("127.0.0.1", server.url, "/v1/wallet", { ...wrongKey, "x-forwarded-for": "203.0.113.5" })
    expectEnvelope(limited, 429, "rate_limit_exceeded")
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    // Another client through the same proxy: its own count.
    expect(await failFrom(server, "127.0.0.1", 1, { "x-forwarded-for": "203.0.113.6" })).toEqual([401])
  })

  test("the right-most untrusted address counts: what a client writes in front of it changes nothing", async () => {
    // The client sends "X-Forwarded-For: 198.51.100.1"; the proxy appends the address it saw.
    const statuses = []
    for (let i = 0; i < limit + 1; i++) {
      const claimed = `198.51.100.${i + 1}`
      statuses.push(await requestFrom("127.0.0.1", server.url, "/v1/wallet", { ...wrongKey, "x-forwarded-for": `${claimed}, 203.0.113.7` }))
    }
    expect(statuses).toEqual(refusedThenLimited)
    // A chain of two trusted proxies (the nearest wrote 127.0.0.1 as the hop before it): the client is still found.
    expect(await failFrom(server, "127.0.0.1", 1, { "x-forwarded-for": "203.0.113.7, 127.0.0.1" })).toEqual([429])
  })

  test("an untrusted peer's forwarding headers are ignored: it is counted under its own address", async () => {
    const statuses = []
    for (let i = 0; i < limit + 1; i++) {
      statuses.push(await requestFrom("127.0.0.2", server.url, "/v1/wallet", {
        ...wrongKey,
        "x-forwarded-for": `198.51.100.${i + 10}`,
        "forwarded": `for=198.51.100.${i + 10}`
      }))
    }
    expect(statuses).toEqual(refusedThenLimited)
    // Naming an address it does not hold spent nothing of that address's count.
    expect(await failFrom(server, "127.0.0.1", 1, { "x-forwarded-for": "198.51.100.10" })).toEqual([401])
  })
})

test("without TRUST_PROXY the forwarding headers are ignored, even from loopback", async () => {
  const server = await limitedServer({})
  try {
    const statuses = []
    for (let i = 0; i < limit + 1; i++) {
      statuses.push(await requestFrom("127.0.0.1", server.url, "/v1/wallet", { ...wrongKey, "x-forwarded-for": `203.0.113.${i + 20}` }))
    }
    expect(statuses).toEqual(refusedThenLimited)
  } finally {
    await server.stop()
  }
})

test("a hop count trusts the peer; TRUST_PROXY_HEADER=forwarded reads Forwarded and ignores X-Forwarded-For", async () => {
  const server = await limitedServer({ TRUST_PROXY: "1", TRUST_PROXY_HEADER: "forwarded" })
  try {
    const forwarded = { "forwarded": `for=192.0.2.60;proto=https, for="[2001:db8::1]:4711"` }
    expect(await failFrom(server, "127.0.0.2", limit + 1, forwarded)).toEqual(refusedThenLimited)
    // The same /64, another host: counted together. X-Forwarded-For is not read in this mode.
    expect(await failFrom(server, "127.0.0.2", 1, { "forwarded": `for="[2001:db8::2]"`, "x-forwarded-for": "203.0.113.30" })).toEqual([429])
    expect(await failFrom(server, "127.0.0.2", 1, { "forwarded": "for=192.0.2.60" })).toEqual([401])
  } finally {
    await server.stop()
  }
})

test("the access log writes the client address: the forwarded one behind a trusted proxy, the peer otherwise", async () => {
  const lines: Array<string> = []
  const server = await limitedServer(
    { LOG_LEVEL: "Info", TRUST_PROXY: "127.0.0.0/31" },
    { logger: Logger.map(Logger.formatJson, (line) => lines.push(line)) }
  )
  try {
    const viaProxy = await answerFrom("127.0.0.1", server.url, "/healthz", { "x-forwarded-for": "203.0.113.40" })
    const stranger = await answerFrom("127.0.0.2", server.url, "/healthz", { "x-forwarded-for": "203.0.113.41" })
    await server.stop()
    const clientOf = (answer: { headers: Headers }) => {
      const requestId = answer.headers.get("x-request-id")
      const line = lines
        .map((text) => JSON.parse(text) as { message: string; annotations: Record<string, unknown> })
        .find((entry) => entry.message === "request" && entry.annotations.request_id === requestId)
      return line?.annotations.client
    }
    expect(clientOf(viaProxy)).toBe("203.0.113.40")
    expect(clientOf(stranger)).toBe("127.0.0.2")
  } finally {
    await server.stop()
  }
})

test("a TRUST_PROXY entry that is no address stops the start, naming the setting and the entry", async () => {
  await expect(limitedServer({ TRUST_PROXY: "10.0.0.0/8, proxy.internal" })).rejects.toThrow(/TRUST_PROXY.*proxy\.internal/)
  await expect(limitedServer({ TRUST_PROXY: "10.0.0.0/33" })).rejects.toThrow(/TRUST_PROXY/)
})

describe("the resolution rule", () => {
  const resolverFor = (env: Record<string, string>) =>
    makeClientAddress(Effect.runSync(ClientAddressConfig.parse(ConfigProvider.fromUnknown(env))))

  test("a list walks from the right past trusted proxies, IPv4 and IPv6 CIDRs alike, and stops at the first stranger", () => {
    const resolve = resolverFor({ TRUST_PROXY: "10.0.0.0/8, fd00::/8, 192.0.2.7" })
    expect(resolve("10.1.2.3", { "x-forwarded-for": "203.0.113.1, 198.51.100.2, 192.0.2.7" })).toBe("198.51.100.2")
    expect(resolve("::ffff:10.1.2.3", { "x-forwarded-for": "[2001:db8::5]:443, fd12::9" })).toBe("2001:db8::5")
    expect(resolve("fd00::1", { "x-forwarded-for": "203.0.113.1:8443" })).toBe("203.0.113.1")
    // Every hop trusted: the farthest one is the client.
    expect(resolve("10.0.0.1", { "x-forwarded-for": "10.0.0.9, 10.0.0.8" })).toBe("10.0.0.9")
    // A hop that is no address stops the walk as "unknown"; an empty header leaves the peer.
    expect(resolve("10.0.0.1", { "x-forwarded-for": "203.0.113.1, garbage" })).toBe("unknown")
    expect(resolve("10.0.0.1", { "x-forwarded-for": " " })).toBe("10.0.0.1")
    expect(resolve("203.0.113.99", { "x-forwarded-for": "198.51.100.2" })).toBe("203.0.113.99")
  })

  test("a hop count takes the address that many hops in from the peer, or the farthest one", () => {
    const two = resolverFor({ TRUST_PROXY: "2" })
    expect(two("10.0.0.1", { "x-forwarded-for": "198.51.100.1, 203.0.113.1, 10.0.0.2" })).toBe("203.0.113.1")
    expect(two("10.0.0.1", { "x-forwarded-for": "203.0.113.1" })).toBe("203.0.113.1")
    expect(resolverFor({ TRUST_PROXY: "1" })("10.0.0.1", {})).toBe("10.0.0.1")
    expect(resolverFor({})("10.0.0.1", { "x-forwarded-for": "203.0.113.1" })).toBe("10.0.0.1")
  })
})
