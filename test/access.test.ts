import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { type AccountBody, type ErrorBody, type HookPage, ledgerState, type Response, startTestServer, type TestServer } from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"
import { requestFrom } from "./support/peer.js"

let server: TestServer

beforeAll(async () => {
  // The key cache off: a revocation or an account change shows on the next request. How long the
  // cache may answer for (AUTH_CACHE_TTL) is test/auth-cache.test.ts's, on TestClock.
  server = await startTestServer({ AUTH_CACHE_TTL: "0 millis" })
})
afterAll(() => server.close())

describe("API keys", () => {
  test("a key in the query string is refused even with a valid bearer header", async () => {
    const { key } = await server.account()
    expectEnvelope(await server.request(`/v1/wallet?api_key=${key}`, { key }), 401, "invalid_api_key")
    expectEnvelope(await server.request(`/v1/wallet?key=${key}`, { key }), 401, "invalid_api_key")
  })

  test("the x-api-key header is ignored", async () => {
    const { key } = await server.account()
    expectEnvelope(await server.request("/v1/wallet", { headers: { "x-api-key": key } }), 401, "invalid_api_key")
  })

  test("missing, malformed, unknown and revoked keys are 401", async () => {
    const { key, keyId } = await server.account()
    expectEnvelope(await server.request("/v1/wallet"), 401, "invalid_api_key")
    expectEnvelope(await server.request("/v1/wallet", { headers: { authorization: `Basic ${key}` } }), 401, "invalid_api_key")
    expectEnvelope(await server.request("/v1/wallet", { key: "hkl_live_short" }), 401, "invalid_api_key")
    expectEnvelope(await server.request("/v1/wallet", { key: key.replace("hkl_live_", "sk_live_") }), 401, "invalid_api_key")
    expectEnvelope(await server.request("/v1/wallet", { key: `hkl_live_${"A".repeat(32)}` }), 401, "invalid_api_key")
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    const revoked = await server.admin(`/admin/keys/${keyId}`, { method: "DELETE" })
    expect(revoked.body).toEqual({ object: "api_key", id: keyId, revoked: true })
    expectEnvelope(await server.request("/v1/wallet", { key }), 401, "invalid_api_key")
  })

  test("every 401 carries a Bearer challenge; error=invalid_token only when a bearer token was sent", async () => {
    const challenge = async (headers: Record<string, string>, query = "") =>
      (await server.request(`/v1/wallet${query}`, { headers })).headers.get("www-authenticate")
    expect(await challenge({})).toBe(`Bearer realm="hookline"`)
    expect(await challenge({ authorization: "Basic abc" })).toBe(`Bearer realm="hookline"`)
    expect(await challenge({ authorization: "Bearer nope" })).toBe(`Bearer realm="hookline", error="invalid_token"`)
    expect(await challenge({ authorization: `Bearer hkl_live_${"A".repeat(32)}` })).toBe(`Bearer realm="hookline", error="invalid_token"`)
    const { key } = await server.account()
    expect(await challenge({ authorization: `Bearer ${key}` }, `?api_key=${key}`)).toBe(`Bearer realm="hookline", error="invalid_request"`)
    // A success carries no challenge.
    expect(await challenge({ authorization: `Bearer ${key}` })).toBeNull()
  })

  test("the scheme name is case-insensitive: bearer and BEARER work like Bearer", async () => {
    const { key } = await server.account()
    for (const scheme of ["bearer", "BEARER", "bEaReR"]) {
      const answer = await server.request("/v1/wallet", { headers: { authorization: `${scheme} ${key}` } })
      expect(answer.status).toBe(200)
    }
  })

  test("the 401 message never echoes the key", async () => {
    const response = await server.request("/v1/wallet", { key: `hkl_live_${"Z".repeat(32)}` })
    expect(JSON.stringify(response.body)).not.toContain("Z".repeat(32))
  })
})

describe("accounts", () => {
  test("a suspended account gets 403 account_suspended on every route, and 200 again once unsuspended", async () => {
    const { accountId, key } = await server.account()
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    const patched = await server.admin<AccountBody>(`/admin/accounts/${accountId}`, { method: "PATCH", body: { suspended: true } })
    expect(patched.body.suspended).toBe(true)
    expectEnvelope(await server.request("/v1/wallet", { key }), 403, "account_suspended")
    expectEnvelope(await server.request("/v1/hooks/search?q=x", { key }), 403, "account_suspended")
    expectEnvelope(await server.request("/v1/webhooks", { key }), 403, "account_suspended")
    // Check order: a key in the query string is refused before the suspension is looked at.
    expectEnvelope(await server.request(`/v1/wallet?api_key=${key}`, { key }), 401, "invalid_api_key")
    expect((await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { suspended: false } })).status).toBe(200)
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
  })

  test.each(["free", "creator"])("a %s plan has no API access: every route is 403 except the reads of its wallet, key, predictions and webhook", async (plan) => {
    const { key } = await server.account({ plan })
    for (const [method, path] of [
      ["GET", "/v1/hooks/categories"],
      ["GET", "/v1/hooks/search?q=money"],
      ["GET", "/v1/hooks/list?category=finance"],
      ["GET", "/v1/hooks/hook_0123456789abcdef0123456789abcdef"],
      ["POST", "/v1/predict/upload"],
      ["POST", "/v1/predict"],
      ["PUT", "/v1/webhooks"],
      ["DELETE", "/v1/webhooks"],
      ["POST", "/v1/webhooks/rotate"],
      ["POST", "/v1/webhooks/test"],
      ["POST", "/v1/webhooks/deliveries/dlv_0123456789abcdef0123456789abcdef/retry"],
      ["PUT", "/v1/wallet/alert"],
      ["DELETE", "/v1/wallet/alert"]
    ]) {
      expectEnvelope(await server.request(path, { method, key }), 403, "api_not_enabled")
    }
    // The reads that stay open (docs/behaviour.md, "Plans and scopes"), each answering as it would with access.
    const wallet = await server.request("/v1/wallet", { key })
    expect(wallet.status).toBe(200)
    expect(wallet.body).toEqual({ object: "wallet", monthly_balance: 0, monthly_period_end: null, topup_balance: 0 })
    for (const path of ["/v1/wallet/transactions", "/v1/wallet/usage", "/v1/wallet/alert", "/v1/keys/current", "/v1/webhooks", "/v1/webhooks/deliveries"]) {
      expect({ path, status: (await server.request(path, { key })).status }).toEqual({ path, status: 200 })
    }
    expectEnvelope(await server.request("/v1/predict/pred_0123456789abcdef0123456789abcdef", { key }), 404, "not_found")
    expectEnvelope(await server.request("/v1/webhooks/deliveries/dlv_0123456789abcdef0123456789abcdef", { key }), 404, "not_found")
  })

  test("access rules come before input validation: no access with a bad query is still 403", async () => {
    const { key } = await server.account({ plan: "free" })
    expectEnvelope(await server.request("/v1/hooks/search", { key }), 403, "api_not_enabled")
  })

  test("plan loss starts a new period, keeps the allowlist open and disables the webhook", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 25 })
    await server.db.query(
      "INSERT INTO webhooks (account_id, url, secret_ciphertext) VALUES ($1, 'https://example.com/hook', 'x')",
      [accountId]
    )
    const patched = await server.admin<AccountBody>(`/admin/accounts/${accountId}`, { method: "PATCH", body: { plan: "free" } })
    expect(patched.status).toBe(200)
    expect(patched.body).toMatchObject({ plan: "free", api_access: false, monthly_grant: 0 })
    expect(patched.body.wallet).toEqual({ object: "wallet", monthly_balance: 0, monthly_period_end: null, topup_balance: 25 })
    const { rows } = await server.db.query("SELECT enabled, url FROM webhooks WHERE account_id = $1", [accountId])
    expect(rows[0]).toEqual({ enabled: false, url: "https://example.com/hook" })
    expectEnvelope(await server.request("/v1/hooks/categories", { key }), 403, "api_not_enabled")
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    const state = await ledgerState(server.db, accountId)
    expect(state.monthly).toBe(state.journalMonthly)
    expect(state.topup).toBe(state.journalTopup)
  })
})

describe("key scopes", () => {
  const scoped: ReadonlyArray<readonly [string, string, string]> = [
    ["GET", "/v1/hooks/search?q=x", "hooks:read"],
    ["GET", "/v1/hooks/list?category=x", "hooks:read"],
    ["GET", "/v1/hooks/hook_0123456789abcdef0123456789abcdef", "hooks:read"],
    ["POST", "/v1/predict/upload", "predict:write"],
    ["POST", "/v1/predict", "predict:write"],
    ["GET", "/v1/predict/pred_0123456789abcdef0123456789abcdef", "predict:write"],
    ["GET", "/v1/webhooks", "webhooks:write"],
    ["PUT", "/v1/webhooks", "webhooks:write"],
    ["DELETE", "/v1/webhooks", "webhooks:write"],
    ["POST", "/v1/webhooks/rotate", "webhooks:write"],
    ["POST", "/v1/webhooks/test", "webhooks:write"],
    ["GET", "/v1/webhooks/deliveries", "webhooks:write"],
    ["GET", "/v1/webhooks/deliveries/dlv_0123456789abcdef0123456789abcdef", "webhooks:write"],
    ["POST", "/v1/webhooks/deliveries/dlv_0123456789abcdef0123456789abcdef/retry", "webhooks:write"]
  ]

  test.each(scoped)("%s %s needs %s", async (method, path, scope) => {
    const others = ["hooks:read", "predict:write", "webhooks:write"].filter((s) => s !== scope)
    const { key } = await server.account({ scopes: others })
    const response = await server.request(path, { method, key })
    expectEnvelope(response, 403, "api_not_enabled")
    expect((response.body as ErrorBody).error.message).toContain(scope)
  })

  test("wallet and categories need only a valid key", async () => {
    const { key } = await server.account({ scopes: [] })
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    expect((await server.request("/v1/hooks/categories", { key })).status).toBe(200)
  })

  test("a suspension is reported before a missing scope", async () => {
    const { accountId, key } = await server.account({ scopes: [] })
    expect((await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { suspended: true } })).status).toBe(200)
    expectEnvelope(await server.request("/v1/hooks/search?q=x", { key }), 403, "account_suspended")
  })
})

describe("rate limits", () => {
  test("a pro key gets 429 past its burst, with Retry-After and RateLimit headers; a refused search is not charged", async () => {
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true" }, { databaseUrl: server.databaseUrl })
    try {
      // A hook the searches below find: a search that runs is charged a credit, so a refused one that ran would show.
      const imported = await limited.admin("/admin/catalog/hooks", {
        method: "POST",
        rawBody: JSON.stringify({ text: "Quotawren: the hook a limited key searches for", platform: "tiktok", source_url: "https://limits.example/1" }),
        headers: { "content-type": "application/x-ndjson" }
      })
      expect(imported.status).toBe(200)
      const { accountId, key } = await limited.account({ plan: "pro", monthly_balance: 100 })
      const before = await ledgerState(limited.db, accountId)
      // Bursts of 30 at once; a slow machine refills tokens meanwhile, so burst until refused.
      const answers: Array<Response> = []
      for (let burst = 0; burst < 10 && !answers.some((a) => a.status === 429); burst++) {
        answers.push(...(await Promise.all(Array.from({ length: 30 }, () => limited.request("/v1/wallet", { key })))))
      }
      const ok = answers.filter((a) => a.status === 200)
      const refused = answers.filter((a) => a.status === 429)
      expect(ok.length).toBeGreaterThanOrEqual(20)
      expect(refused.length).toBeGreaterThanOrEqual(1)
      expect(ok.length + refused.length).toBe(answers.length)
      expect(ok[0].headers.get("ratelimit-policy")).toBe('"pro";q=20;w=2')
      expect(ok[0].headers.get("ratelimit")).toMatch(/^"pro";r=\d+;t=\d+$/)
      const first = refused[0]
      expectEnvelope(first, 429, "rate_limit_exceeded")
      expect(Number(first.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      expect(first.headers.get("ratelimit")).toMatch(/^"pro";r=0;t=\d+$/)
      // Metered routes are limited too, before any reserve: the wallet moves by the answered searches alone.
      const searches = await Promise.all(Array.from({ length: 30 }, () => limited.request<HookPage>("/v1/hooks/search?q=quotawren", { key })))
      const refusedSearches = searches.filter((a) => a.status === 429)
      const answeredSearches = searches.filter((a) => a.status === 200)
      expect(refusedSearches.length).toBeGreaterThanOrEqual(1)
      expect(answeredSearches.length + refusedSearches.length).toBe(searches.length)
      for (const refusedSearch of refusedSearches) {
        expectEnvelope(refusedSearch, 429, "rate_limit_exceeded")
        expect(refusedSearch.headers.get("x-credits-charged")).toBeNull()
      }
      for (const answered of answeredSearches) {
        expect(answered.body.data).toHaveLength(1)
        expect(answered.headers.get("x-credits-charged")).toBe("1")
      }
      const charged = answeredSearches.length
      const after = await ledgerState(limited.db, accountId)
      expect(after).toEqual({ ...before, monthly: before.monthly - charged, journalMonthly: before.journalMonthly - charged })
    } finally {
      await limited.stop()
      await limited.db.end()
    }
  })

  test("failed authentication is limited per client address", async () => {
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true", RATE_LIMIT_FAILED_AUTH_PER_MINUTE: "5" }, {
      databaseUrl: server.databaseUrl
    })
    try {
      const answers = []
      for (let i = 0; i < 7; i++) answers.push(await limited.request("/v1/wallet", { key: `hkl_live_${"x".repeat(32)}` }))
      expect(answers.slice(0, 5).every((a) => a.status === 401)).toBe(true)
      expectEnvelope(answers[6], 429, "rate_limit_exceeded")
      expect(Number(answers[6].headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    } finally {
      await limited.stop()
      await limited.db.end()
    }
  })

  test("the failed-authentication limit counts each client address apart (admin token from 127.0.0.1 and 127.0.0.2)", async () => {
    const limited = await startTestServer({ RATE_LIMIT_ENABLED: "true", RATE_LIMIT_FAILED_AUTH_PER_MINUTE: "20" }, {
      databaseUrl: server.databaseUrl
    })
    try {
      const wrongAdmin = { authorization: "Bearer admin_wrong" }
      const fromFirst = []
      for (let i = 0; i < 21; i++) fromFirst.push(await requestFrom("127.0.0.1", limited.url, "/admin/accounts/acct_nobody", wrongAdmin))
      expect(fromFirst.slice(0, 20)).toEqual(Array.from({ length: 20 }, () => 401))
      expect(fromFirst[20]).toBe(429)
      // Another client, same server: its own count, so a wrong token is a plain 401.
      expect(await requestFrom("127.0.0.2", limited.url, "/admin/accounts/acct_nobody", wrongAdmin)).toBe(401)
      expect(await requestFrom("127.0.0.2", limited.url, "/v1/wallet", { authorization: `Bearer hkl_live_${"x".repeat(32)}` })).toBe(401)
    } finally {
      await limited.stop()
      await limited.db.end()
    }
  })

  test("a tier's bucket is configurable as rate/burst; a malformed value stops the start naming the setting", async () => {
    const tuned = await startTestServer({ RATE_LIMIT_ENABLED: "true", RATE_LIMIT_PRO: "0.01/3" }, { databaseUrl: server.databaseUrl })
    try {
      const { key } = await tuned.account({ plan: "pro" })
      const answers = []
      for (let i = 0; i < 5; i++) answers.push(await tuned.request("/v1/wallet", { key }))
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429, 429])
      expect(answers[0].headers.get("ratelimit-policy")).toBe('"pro";q=3;w=300')
    } finally {
      await tuned.stop()
      await tuned.db.end()
    }
    await expect(startTestServer({ RATE_LIMIT_PRO: "fast" }, { databaseUrl: server.databaseUrl })).rejects.toThrow(/RATE_LIMIT_PRO/)
  })

  test("limits hold across two server processes sharing Redis", async () => {
    const redisUrl = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379"
    // A refill of one token per 100 s: the burst alone decides, however slow the machine is.
    const env = { RATE_LIMIT_ENABLED: "true", REDIS_URL: redisUrl, RATE_LIMIT_PRO: "0.01/20" }
    const a = await startTestServer(env, { databaseUrl: server.databaseUrl })
    const b = await startTestServer(env, { databaseUrl: server.databaseUrl })
    try {
      const { key } = await a.account({ plan: "pro" })
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? a : b).request("/v1/wallet", { key }))
      )
      const ok = answers.filter((r) => r.status === 200).length
      // One bucket of 20 across both processes.
      expect(ok).toBe(20)
      expect(answers.filter((r) => r.status === 429).length).toBe(30 - ok)
    } finally {
      for (const s of [a, b]) {
        await s.stop()
        await s.db.end()
      }
    }
  })
})
