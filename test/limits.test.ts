/**
 * Request limits and the rate-limit headers: the request-head limit (ours with the envelope,
 * Bun's bare one behind it), control characters in paths, the NUL character in text, and the
 * RateLimit headers on every /v1 answer after authentication, a 429 never charging.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { connect } from "node:net"
import { type ErrorBody, ledgerState, startTestServer, type TestServer } from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"

let server: TestServer
beforeAll(async () => {
  server = await startTestServer()
})
afterAll(() => server.close())

const journalRows = async (accountId: string) =>
  Number((await server.db.query("SELECT count(*) AS n FROM credit_journal WHERE account_id = $1", [accountId])).rows[0].n)

describe("request head size", () => {
  test("a head over MAX_HEADER_BYTES (12 KiB) is 431 headers_too_large with the envelope, and charges nothing", async () => {
    const { accountId, key } = await server.account({ monthly_balance: 10 })
    const before = await ledgerState(server.db, accountId)
    const response = await server.request("/v1/hooks/search?q=money", { key, headers: { "x-filler": "x".repeat(13 * 1024) } })
    expectEnvelope(response, 431, "headers_too_large")
    expect((response.body as ErrorBody).error.message).toBe("The request line and headers are larger than 12288 bytes.")
    expect(response.headers.get("connection")).toBe("close")
    expect(await ledgerState(server.db, accountId)).toEqual(before)
    // Just under the limit the same request is served.
    expect((await server.request("/v1/hooks/search?q=money", { key, headers: { "x-filler": "x".repeat(11 * 1024) } })).status).toBe(200)
  })

  test("a long query string counts toward the same limit", async () => {
    const { key } = await server.account()
    expectEnvelope(await server.request(`/v1/hooks/search?q=${"a".repeat(13 * 1024)}`, { key }), 431, "headers_too_large")
  })

  test("over Bun's own 16 KiB limit the request never reaches Hookline: a bare 431 and the connection closed", async () => {
    const response = await fetch(`${server.url}/v1/wallet`, { headers: { "x-filler": "x".repeat(17 * 1024) } })
    expect(response.status).toBe(431)
    expect(response.headers.get("connection")).toBe("close")
    expect(await response.text()).toBe("")
  })

  test("MAX_HEADER_BYTES is configurable", async () => {
    const small = await startTestServer({ MAX_HEADER_BYTES: "2048" }, { databaseUrl: server.databaseUrl })
    try {
      const { key } = await small.account()
      expect((await small.request("/v1/wallet", { key, headers: { "x-filler": "x".repeat(1024) } })).status).toBe(200)
      const refused = await small.request("/v1/wallet", { key, headers: { "x-filler": "x".repeat(3000) } })
      expectEnvelope(refused, 431, "headers_too_large")
      expect((refused.body as ErrorBody).error.message).toContain("2048 bytes")
    } finally {
      await small.stop()
      await small.db.end()
    }
  })
})

/**
 * Sends a request head and then chunked-body chunks of 64 KiB over a raw socket, as fast as the
 * server reads them, until the response arrives or `maxBytes` were written. Returns the status
 * line, the response text and how many body bytes had been written when the answer came.
 */
const chunkedFlood = (port: number, head: string, maxBytes: number) =>
  new Promise<{ readonly response: string; readonly bodyBytesWritten: number }>((resolve, reject) => {
    const chunk = Buffer.from(`10000\r\n${"x".repeat(0x10000)}\r\n`)
    let written = 0
    let response = ""
    let done = false
    const socket = connect(port, "127.0.0.1", () => {
      socket.write(head)
      const pump = () => {
        while (!done && written < maxBytes) {
          written += 0x10000
          if (!socket.write(chunk)) return void socket.once("drain", pump)
        }
      }
      pump()
    })
    socket.on("data", (data) => {
      response += data.toString("latin1")
      if (!done && response.includes("\r\n\r\n")) {
        done = true
        // Give the body a moment to arrive, then report what was written by then.
        setTimeout(() => {
          socket.destroy()
          resolve({ response, bodyBytesWritten: written })
        }, 200)
      }
    })
    socket.on("error", (error) => (done ? undefined : reject(error)))
  })

describe("request bodies", () => {
  /** The status line and envelope of a raw response, checked to be `status` with error `type`. */
  const expectRawEnvelope = (response: string, status: number, type: string) => {
    expect(response.slice(0, response.indexOf("\r\n"))).toStartWith(`HTTP/1.1 ${status}`)
    const body = JSON.parse(response.slice(response.indexOf("\r\n\r\n") + 4)) as ErrorBody
    expect(body.error.type).toBe(type)
    expect(body.error.request_id).toMatch(/^req_/)
  }

  test("an authenticated chunked body past the JSON limit is 413 while it streams, never read whole", async () => {
    const { key } = await server.account()
    const port = Number(new URL(server.url).port)
    const head = "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
      `Authorization: Bearer ${key}\r\nTransfer-Encoding: chunked\r\n\r\n`
    // Up to 256 MiB offered; the answer must come long before the server has taken it all.
    const { response, bodyBytesWritten } = await chunkedFlood(port, head, 256 * 1024 * 1024)
    expectRawEnvelope(response, 413, "payload_too_large")
    expect(response).toContain("The request body is larger than 65536 bytes.")
    // The rest of the body is never read: the connection goes with the answer.
    expect(response.toLowerCase()).toContain("connection: close")
    // Socket buffers hold a few MiB at most: far from the 256 MiB offered.
    expect(bodyBytesWritten).toBeLessThan(32 * 1024 * 1024)
  })

  test("an unauthenticated body is refused 401 before any of it is read (authentication comes before input checks)", async () => {
    const port = Number(new URL(server.url).port)
    const head = "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    const { response, bodyBytesWritten } = await chunkedFlood(port, head, 256 * 1024 * 1024)
    expectRawEnvelope(response, 401, "invalid_api_key")
    expect(bodyBytesWritten).toBeLessThan(32 * 1024 * 1024)
    // A declared Content-Length over the limit: the same 401, not 413.
    const declared = await fetch(`${server.url}/v1/predict`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "x".repeat(100_000)
    })
    expect(declared.status).toBe(401)
  })

  test("a declared Content-Length over the JSON limit is 413 once the caller is known, nothing charged", async () => {
    const { accountId, key } = await server.account({ monthly_balance: 100 })
    const before = await ledgerState(server.db, accountId)
    const response = await fetch(`${server.url}/v1/predict`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ upload_id: "x".repeat(70_000) })
    })
    expectEnvelope({ status: response.status, headers: response.headers, body: await response.json() }, 413, "payload_too_large")
    expect(response.headers.get("connection")).toBe("close")
    expect(await ledgerState(server.db, accountId)).toEqual(before)
  })

  test("a client that hangs up in the middle of a chunked body leaves the server answering as before", async () => {
    const port = Number(new URL(server.url).port)
    for (let i = 0; i < 5; i++) {
      await new Promise<void>((resolve) => {
        const socket = connect(port, "127.0.0.1", () => {
          socket.write("POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
          socket.write('5\r\n{"upl\r\n')
          setTimeout(() => {
            socket.destroy()
            resolve()
          }, 50)
        })
        socket.on("error", () => resolve())
      })
    }
    const { key } = await server.account()
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
  })

  test("a chunked JSON body under the limit is read and decoded as usual", async () => {
    const { key } = await server.account()
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"upload_id":'))
        controller.enqueue(new TextEncoder().encode(`"upl_${"0".repeat(32)}"}`))
        controller.close()
      }
    })
    const response = await fetch(`${server.url}/v1/predict`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body
    })
    // The body was read: the upload id in it is looked up (and is unknown).
    expect(response.status).toBe(404)
    expect(((await response.json()) as ErrorBody).error.type).toBe("not_found")
  })

  test("a multipart Content-Type on a JSON route is 415 with the envelope, never a 500, and charges nothing", async () => {
    const { accountId, key } = await server.account({ monthly_balance: 100 })
    const before = await ledgerState(server.db, accountId)
    const multipart = { "content-type": "multipart/form-data; boundary=x" }
    for (const [method, path] of [["POST", "/v1/predict"], ["PUT", "/v1/webhooks"]] as const) {
      const answer = await server.request(path, { method, key, headers: multipart, rawBody: "this is not multipart" })
      expectEnvelope(answer, 415, "unsupported_media_type")
      expect((answer.body as ErrorBody).error.message).toContain("application/json")
    }
    expect(await ledgerState(server.db, accountId)).toEqual(before)
  })
})

describe("control characters and NUL", () => {
  test("a path with a control character or broken percent-encoding names nothing: 404 not_found", async () => {
    const { key } = await server.account()
    for (const path of ["/v1/predict/%00", "/v1/predict/pred_%0a", "/v1/hooks/%1f", "/admin/accounts/%00", "/v1/predict/%E0%A4%A"]) {
      expectEnvelope(await server.request(path, { key }), 404, "not_found")
    }
    expectEnvelope(await server.admin("/admin/keys/%00", { method: "DELETE" }), 404, "not_found")
  })

  test("NUL in a query is 422 before the reserve; NUL in a JSON body is 422, never a 500", async () => {
    const { accountId, key } = await server.account({ monthly_balance: 10 })
    const journal = await journalRows(accountId)
    const search = await server.request(`/v1/hooks/search?q=${encodeURIComponent("money\u0000")}`, { key })
    expectEnvelope(search, 422, "validation_error")
    expect((search.body as ErrorBody).error.message).toBe("q: must not contain the NUL character (U+0000)")
    // Refused before the reserve: not even a reserve and refund pair in the journal.
    expect(await journalRows(accountId)).toBe(journal)

    expectEnvelope(await server.request("/v1/predict", { method: "POST", key, body: { upload_id: "upl_\u0000" } }), 422, "validation_error")
    const named = await server.admin("/admin/accounts", { method: "POST", body: { plan: "pro", name: "Ann\u0000" } })
    expectEnvelope(named, 422, "validation_error")
    expect((named.body as ErrorBody).error.message).toBe("request: text must not contain the NUL character (U+0000)")
    const granted = await server.admin(`/admin/accounts/${accountId}/credits`, {
      method: "POST",
      body: { bucket: "topup", amount: 5, reason: "gift\u0000" }
    })
    expectEnvelope(granted, 422, "validation_error")
    expect((await ledgerState(server.db, accountId)).topup).toBe(0)
  })
})

describe("rate-limit headers", () => {
  test("every /v1 answer after authentication carries RateLimit-Policy and RateLimit, errors included", async () => {
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true" }, { databaseUrl: server.databaseUrl })
    try {
      const { key } = await limited.account({ plan: "business", monthly_balance: 1 })
      const answers = {
        ok: await limited.request("/v1/wallet", { key }),
        insufficient: await limited.request("/v1/hooks/search?q=money", { key }),
        notFound: await limited.request(`/v1/hooks/hook_${"0".repeat(32)}`, { key }),
        invalid: await limited.request("/v1/hooks/search", { key }),
        badCursor: await limited.request("/v1/hooks/search?q=money&cursor=garbage", { key }),
        badBody: await limited.request("/v1/predict", { method: "POST", key, body: { upload_id: 1 } })
      }
      expect(Object.values(answers).map((a) => a.status)).toEqual([200, 402, 404, 422, 400, 422])
      for (const answer of Object.values(answers)) {
        expect(answer.headers.get("ratelimit-policy")).toBe('"business";q=100;w=2')
        expect(answer.headers.get("ratelimit")).toMatch(/^"business";r=\d+;t=\d+$/)
      }
      // A failed authentication is counted per address and says so too.
      const unknown = await limited.request("/v1/wallet", { key: `hkl_live_${"z".repeat(32)}` })
      expect(unknown.status).toBe(401)
      expect(unknown.headers.get("ratelimit-policy")).toMatch(/^"failed-auth";q=\d+;w=60$/)
    } finally {
      await limited.stop()
      await limited.db.end()
    }
  })

  test("each plan's keys are limited by its tier: plans without API access by pro's, arrangements by business's", async () => {
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true" }, { databaseUrl: server.databaseUrl })
    try {
      const tiers: Record<string, string> = {}
      for (const plan of ["free", "creator", "pro", "business", "enterprise", "invite", "complimentary", "custom"]) {
        const { key } = await limited.account({ plan })
        const answer = await limited.request("/v1/wallet", { key })
        expect(answer.status).toBe(200)
        tiers[plan] = answer.headers.get("ratelimit-policy")!
      }
      expect(tiers).toEqual({
        free: '"pro";q=20;w=2',
        creator: '"pro";q=20;w=2',
        pro: '"pro";q=20;w=2',
        business: '"business";q=100;w=2',
        enterprise: '"enterprise";q=400;w=2',
        invite: '"business";q=100;w=2',
        complimentary: '"business";q=100;w=2',
        custom: '"business";q=100;w=2'
      })
    } finally {
      await limited.stop()
      await limited.db.end()
    }
  })

  test("a 429 on a metered route takes nothing: no hold, no journal row, no X-Credits-Charged", async () => {
    // A refill of one token per 100 s: once drained, the bucket stays empty however slow the machine is.
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true", RATE_LIMIT_PRO: "0.01/20" }, { databaseUrl: server.databaseUrl })
    try {
      const { accountId, key } = await limited.account({ plan: "pro", monthly_balance: 500 })
      // Empty the bucket (burst 20) with free requests, then try every metered route.
      const drained = await Promise.all(Array.from({ length: 25 }, () => limited.request("/v1/wallet", { key })))
      expect(drained.some((a) => a.status === 429)).toBe(true)
      const before = await ledgerState(limited.db, accountId)
      const journal = await journalRows(accountId)
      const holds = Number((await limited.db.query("SELECT count(*) AS n FROM holds WHERE account_id = $1", [accountId])).rows[0].n)
      const metered = await Promise.all([
        limited.request("/v1/hooks/search?q=money", { key }),
        limited.request("/v1/hooks/list?category=finance", { key }),
        limited.request(`/v1/hooks/hook_${"0".repeat(32)}`, { key }),
        limited.request("/v1/predict", { method: "POST", key, body: { upload_id: `upl_${"0".repeat(32)}` } })
      ])
      for (const answer of metered) {
        expectEnvelope(answer, 429, "rate_limit_exceeded")
        expect(answer.headers.get("x-credits-charged")).toBeNull()
        expect(Number(answer.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
        expect(answer.headers.get("ratelimit")).toMatch(/^"pro";r=0;t=\d+$/)
      }
      expect(await ledgerState(limited.db, accountId)).toEqual(before)
      expect(await journalRows(accountId)).toBe(journal)
      expect(Number((await limited.db.query("SELECT count(*) AS n FROM holds WHERE account_id = $1", [accountId])).rows[0].n)).toBe(holds)
    } finally {
      await limited.stop()
      await limited.db.end()
    }
  })
})
