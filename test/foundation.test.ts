import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { type AccountBody, type ApiKeyBody, type ErrorBody, type OpenApiDocument, startTestServer, type TestServer } from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"

let server: TestServer
let key: string

beforeAll(async () => {
  server = await startTestServer()
  key = (await server.account()).key
})
afterAll(() => server.close())

/** Every route of the contract, with a request that reaches it. */
const routes: ReadonlyArray<readonly [string, string]> = [
  ["GET", "/v1/wallet"],
  ["GET", "/v1/hooks/categories"],
  ["GET", "/v1/hooks/search?q=x"],
  ["GET", "/v1/hooks/list?category=x"],
  ["GET", "/v1/hooks/hook_00000000000000000000000000000000"],
  ["POST", "/v1/predict/upload"],
  ["POST", "/v1/predict"],
  ["GET", "/v1/predict/pred_00000000000000000000000000000000"],
  ["GET", "/v1/webhooks"],
  ["PUT", "/v1/webhooks"],
  ["DELETE", "/v1/webhooks"],
  ["POST", "/v1/webhooks/rotate"],
  ["POST", "/v1/webhooks/test"]
]

describe("the contract's routes", () => {
  test.each(routes)("%s %s exists and needs a bearer key", async (method, path) => {
    const response = await server.request(path, { method })
    expectEnvelope(response, 401, "invalid_api_key")
  })

  test("the upload PUT exists outside /v1 and refuses an Authorization header", async () => {
    const response = await server.request("/uploads/abc", { method: "PUT", key, rawBody: "x" })
    expectEnvelope(response, 400, "authorization_not_allowed")
  })

  test("/openapi.json lists every route with its error responses", async () => {
    const response = await server.request<OpenApiDocument>("/openapi.json")
    expect(response.status).toBe(200)
    const spec = response.body
    expect(spec.info.version).toBe("1.0.0")
    expect(spec.components.securitySchemes.bearer).toEqual({ type: "http", scheme: "bearer" })
    const documented = Object.entries(spec.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`)
    )
    for (const [method, path] of routes) {
      const template = path.split("?")[0]
        .replace(/hook_0+$/, "{id}")
        .replace(/pred_0+$/, "{id}")
      expect(documented).toContain(`${method} ${template}`)
    }
    expect(documented).toContain("PUT /uploads/{token}")
    const search = spec.paths["/v1/hooks/search"].get.responses
    for (const status of ["200", "400", "401", "402", "403", "404", "422", "429", "500"]) {
      expect(search[status]).toBeDefined()
    }
    expect(JSON.stringify(spec)).not.toContain("HttpApiDecodeError")
  })

  test("/docs serves the API reference with no external assets", async () => {
    const response = await fetch(`${server.url}/docs`)
    expect(response.status).toBe(200)
    const html = await response.text()
    expect(html).toContain("swagger")
    expect(html).not.toMatch(/<script[^>]+src="https?:/)
  })

  test("/healthz and /readyz answer", async () => {
    expect((await server.request("/healthz")).status).toBe(200)
    const ready = await server.request("/readyz")
    expect(ready.status).toBe(200)
    expect(ready.body).toEqual({ status: "ok", rate_limit_store: "memory" })
  })
})

describe("the error envelope", () => {
  test("an unknown route is a 404 envelope", async () => {
    expectEnvelope(await server.request("/v1/nothing-here", { key }), 404, "not_found")
  })

  test("a wrong method is a 404 envelope", async () => {
    expectEnvelope(await server.request("/v1/wallet", { method: "DELETE", key }), 404, "not_found")
  })

  test("malformed JSON is a 422 naming the body", async () => {
    const response = await server.request("/v1/predict", {
      method: "POST",
      key,
      rawBody: "{not json",
      headers: { "content-type": "application/json" }
    })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toContain("JSON")
  })

  test("a wrong type is a 422 naming the field", async () => {
    const response = await server.request("/v1/predict", { method: "POST", key, body: { upload_id: 5 } })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toContain("upload_id")
  })

  test("a missing property is a 422 naming it", async () => {
    const response = await server.request("/v1/predict", { method: "POST", key, body: {} })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toContain("upload_id")
  })

  test("an extra property is a 422 naming it", async () => {
    const response = await server.request("/v1/predict", { method: "POST", key, body: { upload_id: "upl_x", extra: 1 } })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toContain("extra")
  })

  test("a bad query parameter is a 422 naming it", async () => {
    const missing = await server.request("/v1/hooks/search", { key })
    expectEnvelope(missing, 422, "validation_error")
    expect((missing.body as ErrorBody).error.message).toContain("q")
    const extra = await server.request("/v1/hooks/search?q=a&page=2", { key })
    expectEnvelope(extra, 422, "validation_error")
    expect((extra.body as ErrorBody).error.message).toContain("page")
  })

  test("a JSON body over 64 KiB is a 413", async () => {
    const response = await server.request("/v1/predict", {
      method: "POST",
      key,
      body: { upload_id: "x".repeat(70 * 1024) }
    })
    expectEnvelope(response, 413, "payload_too_large")
  })

  test("a success carries X-Request-Id too", async () => {
    const response = await server.request("/v1/wallet", { key })
    expect(response.status).toBe(200)
    expect(response.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/)
  })

  test("an incoming X-Request-Id is kept when it is 1–128 of [A-Za-z0-9_.:-], else replaced by a new one", async () => {
    const answered = async (incoming: string) =>
      (await server.request("/v1/wallet", { key, headers: { "x-request-id": incoming } })).headers.get("x-request-id")
    for (const kept of ["a", "trace-01.span_2:x", "Z".repeat(128)]) expect(await answered(kept)).toBe(kept)
    for (const refused of ["Z".repeat(129), "has space", "semi;colon", "quote\"", "slash/", "ünïcode", "<script>"]) {
      const id = await answered(refused)
      expect({ refused, id }).toEqual({ refused, id: expect.stringMatching(/^req_[0-9a-f]{32}$/) })
    }
    // An error answer keeps it as well (the envelope says the same id).
    const missing = await server.request<ErrorBody>("/v1/nowhere", { key, headers: { "x-request-id": "mine-1" } })
    expect(missing.headers.get("x-request-id")).toBe("mine-1")
    expect(missing.body.error.request_id).toBe("mine-1")
  })
})

describe("the admin API", () => {
  test("creates an account and a key that then authenticates", async () => {
    const created = await server.admin<AccountBody>("/admin/accounts", {
      method: "POST",
      body: { name: "Acme", plan: "business", topup_balance: 50 }
    })
    expect(created.status).toBe(200)
    expect(created.body).toMatchObject({
      object: "account",
      name: "Acme",
      plan: "business",
      api_access: true,
      suspended: false,
      monthly_grant: 10_000,
      wallet: { object: "wallet", monthly_balance: 10_000, topup_balance: 50 }
    })
    expect(created.body.id).toMatch(/^acct_[0-9a-f]{32}$/)
    const key = await server.admin<ApiKeyBody>(`/admin/accounts/${created.body.id}/keys`, { method: "POST", body: {} })
    expect(key.status).toBe(200)
    expect(key.body.api_key).toMatch(/^hkl_live_[A-Za-z0-9_-]{32}$/)
    expect(key.body.scopes).toEqual(["hooks:read", "predict:write", "webhooks:write"])
    const wallet = await server.request("/v1/wallet", { key: key.body.api_key })
    expect(wallet.status).toBe(200)
    expect(wallet.body).toMatchObject({ monthly_balance: 10_000, topup_balance: 50 })
    const stored = await server.db.query("SELECT key_hash FROM api_keys WHERE id = $1", [key.body.id])
    expect(stored.rows[0].key_hash).not.toContain(key.body.api_key)
  })

  test("refuses a wrong admin token and validates bodies", async () => {
    const wrong = await server.request("/admin/accounts", { method: "POST", key: "nope", body: { plan: "pro" } })
    expectEnvelope(wrong, 401, "invalid_api_key")
    const badPlan = await server.admin("/admin/accounts", { method: "POST", body: { plan: "gold" } })
    expectEnvelope(badPlan, 422, "validation_error")
    expect((badPlan.body as ErrorBody).error.message).toContain("plan")
    const unknown = await server.admin("/admin/accounts/acct_nope")
    expectEnvelope(unknown, 404, "not_found")
  })

  test("answers 404 on a real database with no ADMIN_TOKEN", async () => {
    const bare = await startTestServer({ ADMIN_TOKEN: "" }, { databaseUrl: server.databaseUrl })
    try {
      const response = await fetch(`${bare.url}/admin/accounts/acct_x`, { headers: { authorization: `Bearer ${bare.adminToken}` } })
      expect(response.status).toBe(404)
    } finally {
      await bare.stop()
      await bare.db.end()
    }
  })
})
