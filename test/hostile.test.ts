/**
 * Hostile tenants: slips against the documented behaviour (docs/behaviour.md), each sent as an
 * attacker would. Every test checks the answer (status and envelope), that the server still
 * answers, and that nothing was charged or lost (balance == sum(journal), no hold left pending).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Duration, Effect, Redacted } from "effect"
import { TestClock } from "effect/testing"
import { createHash } from "node:crypto"
import { readFileSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { loadServerSecrets } from "../src/Config.js"
import { makeBoundedMemoryStore } from "../src/RateLimit/MemoryStore.js"
import { clientOf } from "../src/RateLimit/RateLimits.js"
import { expectEnvelope } from "./support/envelope.js"
import {
  type AccountBody,
  type ApiKeyBody,
  type ErrorBody,
  type HookPage,
  ledgerState,
  type PredictionBody,
  type Response as ServerResponse,
  startTestServer,
  type TestServer,
  type TransactionPage,
  type UploadLink,
  type WalletBody,
  type WebhookTestBody
} from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

let server: TestServer

beforeAll(async () => {
  server = await startTestServer(
    { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true", WEBHOOK_RESOLVE_TIMEOUT: "2 seconds" },
    { background: false }
  )
})
afterAll(() => server.close())

/** Balance == sum(journal), no hold pending, and the total equals `expected`. */
const expectUntouched = async (accountId: string, expected: number) => {
  const state = await ledgerState(server.db, accountId)
  expect(state.monthly).toBe(state.journalMonthly)
  expect(state.topup).toBe(state.journalTopup)
  expect(state.pendingHolds).toBe(0)
  expect(state.monthly + state.topup).toBe(expected)
}

const expectAlive = async () => expect((await server.request("/healthz")).status).toBe(200)

/** The first bytes of an MP4 (an `ftyp` box): enough for the upload's byte sniffing. */
const mp4Head = () => {
  const bytes = new Uint8Array(4096)
  bytes.set([0, 0, 0, 0x18], 0)
  bytes.set(new TextEncoder().encode("ftypisom"), 4)
  return bytes
}

const uploadPath = (link: UploadLink) => new URL(link.upload_url).pathname

describe("without API access", () => {
  test("the wallet and its own billing records stay open; metered and webhook-changing routes give 403", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 30, topup_balance: 5 })
    expect((await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { plan: "free" } })).status).toBe(200)
    const before = await ledgerState(server.db, accountId)

    expect((await server.request<WalletBody>("/v1/wallet", { key })).status).toBe(200)
    const history = await server.request<TransactionPage>("/v1/wallet/transactions", { key })
    expect(history.status).toBe(200)
    expect(history.body.data.length).toBeGreaterThan(0)
    expect(history.body.data.every((row) => row.object === "credit_transaction")).toBe(true)
    expect((await server.request("/v1/webhooks", { key })).status).toBe(200)

    for (const [method, path] of [
      ["GET", "/v1/hooks/search?q=hook"],
      ["GET", "/v1/hooks/categories"],
      ["POST", "/v1/predict/upload"],
      ["PUT", "/v1/webhooks"],
      ["POST", "/v1/webhooks/test"]
    ] as const) {
      const refused = await server.request(path, { method, key, ...(method === "PUT" ? { body: { url: "https://example.com/" } } : {}) })
      expectEnvelope(refused, 403, "api_not_enabled")
    }
    await expectUntouched(accountId, before.monthly + before.topup)
  })
})

describe("POST /v1/webhooks/test", () => {
  test("a host that no longer resolves is an attempt without an HTTP answer, not a 422", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 10 })
    expect((await server.request("/v1/webhooks", { method: "PUT", key, body: { url: "http://127.0.0.1:9/hook" } })).status).toBe(200)
    // The name resolved when it was set; it does not any more (.invalid never resolves, RFC 6761).
    await server.db.query("UPDATE webhooks SET url = $2 WHERE account_id = $1", [accountId, "http://gone.invalid/hook"])
    const sent = await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })
    expect(sent.status).toBe(200)
    expect(sent.body).toEqual({ object: "webhook_test", delivered: false, status_code: null, event: "prediction.succeeded" })
    // Without any webhook it is still 422.
    const other = await server.account({ plan: "pro", monthly_balance: 10 })
    expectEnvelope(await server.request("/v1/webhooks/test", { method: "POST", key: other.key }), 422, "validation_error")
    await expectUntouched(accountId, 10)
  })
})

describe("q length", () => {
  test("counts characters, not UTF-16 units: 200 emoji are 200 characters, 201 are too many", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 10 })
    const ok = await server.request(`/v1/hooks/search?q=${encodeURIComponent("😀".repeat(200))}`, { key })
    expect(ok.status).toBe(200)
    expect(ok.headers.get("x-credits-charged")).toBe("0")
    const tooLong = await server.request(`/v1/hooks/search?q=${encodeURIComponent("😀".repeat(201))}`, { key })
    expectEnvelope(tooLong, 422, "validation_error")
    expect((tooLong.body as ErrorBody).error.message).toContain("200 characters")
    const ascii = await server.request(`/v1/hooks/search?q=${"a".repeat(201)}`, { key })
    expectEnvelope(ascii, 422, "validation_error")
    await expectUntouched(accountId, 10)
  })
})

describe("upload links after the key is revoked or the account suspended", () => {
  test("a revoked key's link takes no file and charges nothing", async () => {
    const { accountId, key, keyId } = await server.account({ plan: "pro", monthly_balance: 50 })
    const link = (await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })).body
    expect((await server.admin(`/admin/keys/${keyId}`, { method: "DELETE" })).status).toBe(200)
    const put = await server.request(uploadPath(link), { method: "PUT", rawBody: mp4Head() })
    expectEnvelope(put, 410, "upload_expired")
    const rows = await server.db.query("SELECT status, hold_id FROM predictions WHERE id = $1", [link.prediction_id])
    expect(rows.rows[0]).toEqual({ status: "awaiting_upload", hold_id: null })
    await expectUntouched(accountId, 50)
  })

  test("a suspended account's link takes no file and charges nothing", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 50 })
    const link = (await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })).body
    expect((await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { suspended: true } })).status).toBe(200)
    expectEnvelope(await server.request(uploadPath(link), { method: "PUT", rawBody: mp4Head() }), 410, "upload_expired")
    await expectUntouched(accountId, 50)
  })

  test("a key revoked while its file streams in: the file lands, but nothing is reserved", async () => {
    const { accountId, key, keyId } = await server.account({ plan: "pro", monthly_balance: 50 })
    const link = (await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })).body
    let release: () => void = () => {}
    const revoked = new Promise<void>((resolve) => (release = resolve))
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(mp4Head())
        await revoked
        controller.enqueue(new Uint8Array(1024))
        controller.close()
      }
    })
    const put = fetch(server.url + uploadPath(link), { method: "PUT", body, duplex: "half" } as RequestInit)
    // The PUT has claimed the link (the body is streaming) before the key is revoked.
    const claimDeadline = Date.now() + 15_000
    for (;;) {
      const { rows } = await server.db.query("SELECT status FROM uploads WHERE id = $1", [link.upload_id])
      if (rows[0].status === "receiving") break
      if (Date.now() > claimDeadline) throw new Error(`the streaming PUT never claimed its link (upload ${rows[0].status})`)
      await Bun.sleep(10)
    }
    expect((await server.admin(`/admin/keys/${keyId}`, { method: "DELETE" })).status).toBe(200)
    release()
    expect((await put).status).toBe(200)
    const prediction = await server.db.query("SELECT status, hold_id FROM predictions WHERE id = $1", [link.prediction_id])
    expect(prediction.rows[0]).toEqual({ status: "awaiting_upload", hold_id: null })
    await expectUntouched(accountId, 50)
  })
})

describe("Idempotency-Key", () => {
  test("is scoped to the API key: another key of the same account does not replay the first key's answer", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 50 })
    const second = (await server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, { method: "POST", body: {} })).body.api_key
    const headers = { "idempotency-key": "same-key-for-both" }
    const first = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key, headers })
    const again = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key, headers })
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(again.body.upload_id).toBe(first.body.upload_id)
    const other = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key: second, headers })
    expect(other.status).toBe(200)
    expect(other.headers.get("idempotent-replayed")).toBeNull()
    expect(other.body.upload_id).not.toBe(first.body.upload_id)
    // The second key's own link works for it; the first key's prediction stays the first key's.
    expect((await server.request<PredictionBody>(`/v1/predict/${other.body.prediction_id}`, { key: second })).status).toBe(200)
    expectEnvelope(await server.request(`/v1/predict/${first.body.prediction_id}`, { key: second }), 404, "not_found")
    await expectUntouched(accountId, 50)
  })
})

describe("admin credits", () => {
  test("a grant beyond what a balance can hold is 422 with a clear message, and credits nothing", async () => {
    const { accountId } = await server.account({ plan: "pro", monthly_balance: 10, topup_balance: 0 })
    for (const amount of ["9223372036854775808", "1e300", "9007199254740992"]) {
      const refused = await server.admin(`/admin/accounts/${accountId}/credits`, {
        method: "POST",
        rawBody: `{"bucket":"topup","amount":${amount}}`,
        headers: { "content-type": "application/json" }
      })
      expectEnvelope(refused, 422, "validation_error")
      expect((refused.body as ErrorBody).error.message).toContain("amount")
    }
    // The largest amount is taken once; a second grant that would overflow the balance is 422.
    const max = Number.MAX_SAFE_INTEGER
    expect((await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: max } })).status).toBe(200)
    const overflow = await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 1 } })
    expectEnvelope(overflow, 422, "validation_error")
    expect((overflow.body as ErrorBody).error.message).toContain("balance")
    const account = await server.admin<AccountBody>(`/admin/accounts/${accountId}`)
    expect(account.body.wallet.topup_balance).toBe(max)
    await expectUntouched(accountId, 10 + max)
    // An opening balance or monthly grant out of range is refused the same way.
    for (const body of [
      { plan: "custom", monthly_grant: 2 ** 31 },
      { plan: "pro", topup_balance: 2 ** 53 }
    ]) {
      expectEnvelope(await server.admin("/admin/accounts", { method: "POST", body }), 422, "validation_error")
    }
    await expectAlive()
  })
})

describe("failed /admin authentication", () => {
  test("is limited per client address like /v1's: past the limit 429 with Retry-After, the real token still works", async () => {
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true", RATE_LIMIT_FAILED_AUTH_PER_MINUTE: "3" }, { background: false })
    try {
      const statuses: Array<number> = []
      for (let i = 0; i < 5; i++) {
        const refused = await fetch(`${limited.url}/admin/accounts/acct_x`, { headers: { authorization: `Bearer wrong-${i}` } })
        statuses.push(refused.status)
        const body = await refused.json() as ErrorBody
        expect(body.error.type).toBe(refused.status === 401 ? "invalid_api_key" : "rate_limit_exceeded")
        if (refused.status === 429) expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0)
      }
      expect(statuses).toEqual([401, 401, 401, 429, 429])
      // Only failures count: the operator's own token is not locked out.
      const created = await limited.admin<AccountBody>("/admin/accounts", { method: "POST", body: { plan: "pro" } })
      expect(created.status).toBe(200)
    } finally {
      await limited.close()
    }
  }, 60_000)
})

describe("secrets.json", () => {
  test("processes starting together on a fresh DATA_DIR all end up with the same secrets", async () => {
    const dataDir = join(tempDir("hookline-secrets-"), "data")
    const script = `
      import { Effect, Redacted } from "effect"
      import { createHash } from "node:crypto"
      import { readSync } from "node:fs"
      import { loadServerSecrets } from "${join(import.meta.dir, "../src/Config.ts")}"
      // Start together: modules loaded, say so, then block until the test's go (a byte on stdin).
      console.log("ready")
      readSync(0, new Uint8Array(1))
      const secrets = await Effect.runPromise(loadServerSecrets)
      const digest = (value) => createHash("sha256").update(Redacted.value(value)).digest("hex")
      console.log(JSON.stringify([digest(secrets.adminToken), digest(secrets.cursorSecret), digest(secrets.webhookSecretKey)]))`
    // Embedded mode (no DATABASE_URL) and no secret in the environment: every secret is generated.
    const { DATABASE_URL: _database, ADMIN_TOKEN: _admin, CURSOR_SECRET: _cursor, WEBHOOK_SECRET_KEY: _webhook, ...inherited } = process.env
    const env = { ...inherited, DATA_DIR: dataDir }
    const children = Array.from({ length: 8 }, () =>
      Bun.spawn([process.execPath, "-e", script], { env, stdin: "pipe", stdout: "pipe", stderr: "pipe", cwd: join(import.meta.dir, "..") }))
    /** A child's output: its "ready" line (awaited first), then what it prints once released. */
    const outputsOf = children.map((child) => {
      const reader = child.stdout.getReader()
      const decoder = new TextDecoder()
      let text = ""
      const readUntil = async (done: (text: string) => boolean) => {
        while (!done(text)) {
          const chunk = await reader.read()
          if (chunk.done) throw new Error(`a child ended before it was done: ${text}${await new Response(child.stderr).text()}`)
          text += decoder.decode(chunk.value, { stream: true })
        }
        return text
      }
      return {
        ready: readUntil((sofar) => sofar.includes("ready\n")),
        rest: async () => {
          await readUntil((sofar) => sofar.split("\n").length > 2)
          const [err, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
          if (code !== 0) throw new Error(err)
          return text.slice(text.indexOf("ready\n") + "ready\n".length).trim()
        }
      }
    })
    // Every process is loaded and blocked on its stdin before any is released: they race for real.
    await Promise.all(outputsOf.map((output) => output.ready))
    for (const child of children) child.stdin.write("g")
    for (const child of children) void child.stdin.flush()
    const outputs = await Promise.all(outputsOf.map((output) => output.rest()))
    expect(new Set(outputs).size).toBe(1)
    const stored = JSON.parse(readFileSync(join(dataDir, "secrets.json"), "utf8")) as Record<string, string>
    const digest = (value: string) => createHash("sha256").update(value).digest("hex")
    expect(JSON.parse(outputs[0])).toEqual([digest(stored.admin_token), digest(stored.cursor_secret), digest(stored.webhook_secret_key)])
    expect(statSync(join(dataDir, "secrets.json")).mode & 0o777).toBe(0o600)
  }, 60_000)
})

describe("a leftover admin token", () => {
  test("an admin_token left in DATA_DIR/secrets.json by an embedded run opens nothing once DATABASE_URL is set without ADMIN_TOKEN", async () => {
    const dataDir = tempDir("hookline-leftover-")
    const leftover = "leftover_admin_token_from_an_embedded_run"
    writeFileSync(join(dataDir, "secrets.json"), JSON.stringify({ admin_token: leftover, cursor_secret: "c".repeat(43), webhook_secret_key: "w".repeat(43) }), { mode: 0o600 })
    // The embedded server that wrote it would use it (it printed it in its banner).
    const embedded = await Effect.runPromise(loadServerSecrets.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromUnknown({ DATA_DIR: dataDir }))))
    expect(embedded.adminToken === null ? null : Redacted.value(embedded.adminToken)).toBe(leftover)

    const switched = await startTestServer({ DATA_DIR: dataDir, ADMIN_TOKEN: "" }, { databaseUrl: server.databaseUrl, background: false })
    try {
      const accountsBefore = (await switched.db.query<{ n: number }>("SELECT count(*)::int AS n FROM accounts")).rows[0].n
      const bearer = { authorization: `Bearer ${leftover}`, "content-type": "application/json" }
      const created = await fetch(`${switched.url}/admin/accounts`, { method: "POST", headers: bearer, body: JSON.stringify({ plan: "pro" }) })
      const answer = { status: created.status, headers: created.headers, body: await created.json() }
      expectEnvelope(answer, 404, "not_found")
      expect((await fetch(`${switched.url}/admin/accounts/acct_nobody`, { headers: bearer })).status).toBe(404)
      expect((await switched.db.query<{ n: number }>("SELECT count(*)::int AS n FROM accounts")).rows[0].n).toBe(accountsBefore)
    } finally {
      await switched.stop()
    }
  })
})

describe("/metrics", () => {
  /** The value of an unlabelled or labelled sample line, or undefined when absent. */
  const sample = (text: string, line: string) => {
    const found = text.split("\n").find((row) => row.startsWith(`${line} `))
    return found === undefined ? undefined : Number(found.slice(line.length + 1))
  }

  test("is not public: 404 on the API port without METRICS_TOKEN, whatever is sent", async () => {
    for (const headers of [{} as Record<string, string>, { authorization: `Bearer ${server.adminToken}` }, { authorization: "Bearer guess" }]) {
      const response = await fetch(`${server.url}/metrics`, { headers })
      expectEnvelope({ status: response.status, headers: response.headers, body: await response.json() }, 404, "not_found")
    }
    await expectAlive()
  })

  test("with METRICS_TOKEN: 401 without it or with another, 200 with it; gauges are read at most once per interval", async () => {
    const token = "a-long-random-metrics-token"
    const guarded = await startTestServer(
      { METRICS_TOKEN: token, METRICS_REFRESH_INTERVAL: "10 seconds" },
      { background: false }
    )
    try {
      for (const headers of [{} as Record<string, string>, { authorization: "Bearer wrong" }, { authorization: `Basic ${token}` }]) {
        const response = await fetch(`${guarded.url}/metrics`, { headers })
        expectEnvelope({ status: response.status, headers: response.headers, body: await response.json() }, 401, "invalid_api_key")
      }
      const scrape = async () => {
        const response = await fetch(`${guarded.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })
        expect(response.status).toBe(200)
        return response.text()
      }
      expect(sample(await scrape(), 'hookline_jobs{state="queued"}')).toBe(0)
      const owner = await guarded.account({ plan: "enterprise" })
      await guarded.db.query(
        "INSERT INTO predictions (id, account_id, key_id, status, queued_at) VALUES ('pred_m1', $1, $2, 'queued', now())",
        [owner.accountId, owner.keyId]
      )
      // Scrapes within the interval answer from the last read: a scrape storm costs no queries.
      const burst = await Promise.all(Array.from({ length: 20 }, scrape))
      for (const text of burst) expect(sample(text, 'hookline_jobs{state="queued"}')).toBe(0)
      // The next read, once the interval has passed, sees the new job.
      let seen: number | undefined = 0
      for (let i = 0; i < 60 && seen === 0; i++) {
        await Bun.sleep(500)
        seen = sample(await scrape(), 'hookline_jobs{state="queued"}')
      }
      expect(seen).toBe(1)
    } finally {
      await guarded.close()
    }
  }, 60_000)

  /** A loopback port free a moment ago. */
  const freePort = async () => {
    const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() })
    const port = probe.port!
    await probe.stop(true)
    return port
  }

  test("METRICS_PORT serves GET /metrics alone, through the app's pipeline; the API port keeps it hidden", async () => {
    const port = await freePort()
    const separate = await startTestServer({ METRICS_PORT: String(port), METRICS_HOST: "127.0.0.1" })
    try {
      const metrics = await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { "x-request-id": "scrape-1" } })
      expect(metrics.status).toBe(200)
      expect(metrics.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8")
      // The request pipeline's: the caller's request id kept, or a new one.
      expect(metrics.headers.get("x-request-id")).toBe("scrape-1")
      expect(await metrics.text()).toContain("# TYPE http_server_requests_total counter")
      for (const [method, path] of [["GET", "/v1/wallet"], ["GET", "/docs"], ["GET", "/openapi.json"], ["GET", "/healthz"], ["POST", "/metrics"], ["GET", "/nothing"]]) {
        const other = await fetch(`http://127.0.0.1:${port}${path}`, { method })
        const body = await other.json() as ErrorBody
        expectEnvelope({ status: other.status, headers: other.headers, body }, 404, "not_found")
        expect(body.error.message).toBe("Only GET /metrics is served on this port.")
      }
      const hidden = await fetch(`${separate.url}/metrics`)
      expectEnvelope({ status: hidden.status, headers: hidden.headers, body: await hidden.json() }, 404, "not_found")
    } finally {
      await separate.close()
    }
    // The listener stops with the server.
    expect(await fetch(`http://127.0.0.1:${port}/metrics`).then(() => "answered", () => "closed")).toBe("closed")
  }, 60_000)

  test("with METRICS_TOKEN both listeners ask for it, and a refused token counts toward the address's failed authentications", async () => {
    const port = await freePort()
    const token = "a-long-random-metrics-token"
    const limited = await startTestServer(
      { METRICS_PORT: String(port), METRICS_TOKEN: token, RATE_LIMIT_ENABLED: "true", RATE_LIMIT_FAILED_AUTH_PER_MINUTE: "3" }
    )
    const metricsPort = `http://127.0.0.1:${port}/metrics`
    const scrape = (url: string, given: string) => fetch(url, { headers: { authorization: `Bearer ${given}` } })
    try {
      expect((await scrape(metricsPort, token)).status).toBe(200)
      expect((await scrape(`${limited.url}/metrics`, token)).status).toBe(200)
      const statuses: Array<number> = []
      const note = async (response: Response) => {
        statuses.push(response.status)
        const body = await response.json() as ErrorBody
        expect(body.error.type).toBe(response.status === 401 ? "invalid_api_key" : "rate_limit_exceeded")
        if (response.status === 429) expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0)
      }
      // Two refused on the metrics port and one on the API port's /metrics use up the 3 a minute...
      await note(await scrape(metricsPort, "wrong-1"))
      await note(await scrape(metricsPort, "wrong-2"))
      await note(await scrape(`${limited.url}/metrics`, "wrong-3"))
      // ...so a wrong API key from the same address is now refused 429, and so is the metrics port.
      await note(await fetch(`${limited.url}/v1/wallet`, { headers: { authorization: "Bearer hkl_live_wrong" } }))
      await note(await scrape(metricsPort, "wrong-4"))
      expect(statuses).toEqual([401, 401, 401, 429, 429])
      // Only failures count: the scraper's own token still works.
      expect((await scrape(metricsPort, token)).status).toBe(200)
    } finally {
      await limited.close()
    }
  }, 60_000)
})

describe("a client hanging up", () => {
  test("during its key lookup does not fail the other requests of that key (they shared the lookup)", async () => {
    const quick = await startTestServer({ AUTH_CACHE_TTL: "1 millis" }, { background: false })
    try {
      const { key } = await quick.account({ plan: "enterprise", monthly_balance: 10 })
      const statuses = new Map<number, number>()
      for (let i = 0; i < 60; i++) {
        const controller = new AbortController()
        const abandoned = fetch(`${quick.url}/v1/wallet`, { headers: { authorization: `Bearer ${key}` }, signal: controller.signal })
          .catch(() => null)
        const others = Array.from({ length: 4 }, () =>
          fetch(`${quick.url}/v1/wallet`, { headers: { authorization: `Bearer ${key}` } }).then(async (r) => (await r.text(), r.status)))
        setTimeout(() => controller.abort(), i % 5)
        await abandoned
        for (const status of await Promise.all(others)) statuses.set(status, (statuses.get(status) ?? 0) + 1)
      }
      expect([...statuses]).toEqual([[200, 240]])
    } finally {
      await quick.close()
    }
  }, 120_000)
})

describe("the substring fallback (a q with no searchable word)", () => {
  /** Imports `texts` as hooks, the i-th published at `publishedAt(i)` (epoch milliseconds). */
  const importTexts = async (server: TestServer, texts: ReadonlyArray<string>, publishedAt: (i: number) => number) => {
    const imported = await server.admin("/admin/catalog/hooks", {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      rawBody: texts.map((text, i) =>
        JSON.stringify({ text, platform: "tiktok", source_url: `https://fallback.example/${i}`, published_at: new Date(publishedAt(i)).toISOString() })
      ).join("\n")
    })
    expect(imported.status).toBe(200)
  }
  /** An hour apart, the first the newest. */
  const newestFirst = (i: number) => Date.UTC(2026, 0, 1) - i * 3_600_000

  test("past the newest entries it finds matches through the trigram index, with % and _ taken literally", async () => {
    // A walk window of 5: the fallback walks the newest entry, then looks the older ones up.
    const narrow = await startTestServer({ SEARCH_WALK_WINDOW: "5", CATALOG_CACHE_ENTRIES: "0" }, { background: false })
    try {
      const { accountId, key } = await narrow.account({ plan: "pro", monthly_balance: 20 })
      const texts = ["Start: the_%and finish", "Start: theXYZand finish", "Plain words only", "Odd: the_%and again", "Newest: nothing here"]
      await importTexts(narrow, texts, (i) => Date.UTC(2026, 0, 1 + i))
      const page = await narrow.request<HookPage>(`/v1/hooks/search?q=${encodeURIComponent("the_%and")}`, { key })
      expect(page.status).toBe(200)
      expect(page.body.data.map((hook) => hook.text)).toEqual(["Odd: the_%and again", "Start: the_%and finish"])
      expect(page.headers.get("x-credits-charged")).toBe("1")
      // No trigram in the pattern: the plain scan finds it all the same.
      const symbols = await narrow.request<HookPage>(`/v1/hooks/search?q=${encodeURIComponent("_%")}`, { key })
      expect(symbols.body.data.map((hook) => hook.text)).toEqual(["Odd: the_%and again", "Start: the_%and finish"])
      const state = await ledgerState(narrow.db, accountId)
      expect(state.monthly + state.topup).toBe(18)
      expect(state.pendingHolds).toBe(0)
      expect(state.monthly).toBe(state.journalMonthly)
    } finally {
      await narrow.close()
    }
  }, 60_000)

  test("a common pattern walks on past the first window, then the index finds the older matches, in order and once each", async () => {
    // A walk window of 10: a first window of 2 entries, then (when those say the page fills
    // within 50 more) a longer walk of 100 entries, then the trigram index past the last of them.
    const narrow = await startTestServer({ SEARCH_WALK_WINDOW: "10", CATALOG_CACHE_ENTRIES: "0" }, { background: false })
    try {
      const { accountId, key } = await narrow.account({ plan: "pro", monthly_balance: 20 })
      // Entries 0–1 (the first window) match, then every tenth of the longer walk (2–101), then
      // every seventh past it, the index's share.
      const matches = (i: number) => i < 2 || (i < 102 && i % 10 === 5) || (i >= 102 && i % 7 === 0)
      const texts = Array.from({ length: 300 }, (_, i) => (matches(i) ? `Hook ${i}: the story of a stranger` : `Hook ${i}: plain words only`))
      await importTexts(narrow, texts, newestFirst)
      const page = await narrow.request<HookPage>(`/v1/hooks/search?q=${encodeURIComponent("OF A")}`, { key })
      expect(page.status).toBe(200)
      const expected = texts.filter((_, i) => matches(i))
      expect(expected).toHaveLength(40)
      expect(page.body.data.map((hook) => hook.text)).toEqual(expected)
      expect(page.body.has_more).toBe(false)
      expect(page.headers.get("x-credits-charged")).toBe("2")
      const state = await ledgerState(narrow.db, accountId)
      expect(state.monthly + state.topup).toBe(18)
      expect(state.pendingHolds).toBe(0)
    } finally {
      await narrow.close()
    }
  }, 60_000)

  test("a pattern with no trigram finds every match in order, common (walked page by page) or rare (every hook read)", async () => {
    const narrow = await startTestServer({ SEARCH_WALK_WINDOW: "10", CATALOG_CACHE_ENTRIES: "0" }, { background: false })
    try {
      const { key } = await narrow.account({ plan: "pro", monthly_balance: 20 })
      // "!!" in every other hook: the first window (2 entries) finds one, so the page is expected
      // within 100 entries, under half of the 300 hooks: the walk goes on, page after page.
      // "xq" only in the two oldest: the first window finds none, so the whole table is read.
      const texts = Array.from({ length: 300 }, (_, i) => (i % 2 === 0 ? `Hook ${i} !!` : i >= 297 ? `Hook ${i} xq` : `Hook ${i}`))
      await importTexts(narrow, texts, newestFirst)
      const pages: Array<Array<string>> = []
      let cursor: string | null = null
      do {
        const suffix: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`
        const page: ServerResponse<HookPage> = await narrow.request<HookPage>(`/v1/hooks/search?q=${encodeURIComponent("!!")}${suffix}`, { key })
        expect(page.status).toBe(200)
        pages.push(page.body.data.map((hook) => hook.text))
        cursor = page.body.next_cursor
      } while (cursor !== null)
      expect(pages.map((page) => page.length)).toEqual([50, 50, 50])
      expect(pages.flat()).toEqual(texts.filter((_, i) => i % 2 === 0))
      const rare = await narrow.request<HookPage>(`/v1/hooks/search?q=xq`, { key })
      expect(rare.body.data.map((hook) => hook.text)).toEqual(["Hook 297 xq", "Hook 299 xq"])
    } finally {
      await narrow.close()
    }
  }, 60_000)
})

describe("the in-process rate limit store", () => {
  test("stays within its capacity under a flood of addresses, and forgets spent counters", async () => {
    const { store, size } = makeBoundedMemoryStore(100)
    const window = (key: string) => Effect.map(store.fixedWindow({ key, tokens: 1, refillRate: Duration.millis(500), limit: 3 }), ([count]) => count)
    // The store reads the Clock: TestClock moves its time.
    const seen = await Effect.runPromise(Effect.gen(function*() {
      for (let i = 0; i < 1_000; i++) yield* window(`auth:10.0.${i >> 8}.${i & 255}`)
      const sizeAfterFlood = size()
      for (let i = 0; i < 3; i++) yield* window("auth:attacker")
      const over = yield* window("auth:attacker")
      yield* TestClock.adjust(1_499)
      const overAtWindowEnd = yield* window("auth:attacker")
      yield* TestClock.adjust(1)
      return { sizeAfterFlood, over, overAtWindowEnd, afterWindow: yield* window("auth:attacker") }
    }).pipe(Effect.provide(TestClock.layer())))
    expect(seen.sizeAfterFlood).toBeLessThanOrEqual(100)
    // A counter over its limit stays over it while its window lasts (3 tokens of 500 ms)...
    expect(seen.over).toBeGreaterThan(3)
    expect(seen.overAtWindowEnd).toBeGreaterThan(3)
    // ...and is gone once it has run out.
    expect(seen.afterWindow).toBe(1)
  })

  test("counts an IPv6 client per /64 and an IPv4-mapped one as its IPv4 address", () => {
    expect(clientOf("2001:db8:1:2:aaaa::1")).toBe(clientOf("2001:db8:1:2:ffff:ffff:ffff:ffff"))
    expect(clientOf("2001:db8:1:2::1")).toBe("2001:db8:1:2::/64")
    expect(clientOf("2001:db8:1:3::1")).not.toBe(clientOf("2001:db8:1:2::1"))
    expect(clientOf("::ffff:192.0.2.7")).toBe("192.0.2.7")
    expect(clientOf("192.0.2.7")).toBe("192.0.2.7")
  })
})
