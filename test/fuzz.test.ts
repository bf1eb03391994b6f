/**
 * Hostile input: random and adversarial requests to every route. Every answer must be a
 * documented status with the error envelope (never a 500), and rejected requests never move
 * credits: the wallet ends exactly where the sum of X-Credits-Charged says.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import fc from "fast-check"
import { ledgerState, startTestServer, type TestServer } from "./support/server.js"

let server: TestServer
let account: { accountId: string; key: string }

beforeAll(async () => {
  server = await startTestServer()
  account = await server.account({ plan: "pro", monthly_balance: 40, topup_balance: 3 })
})
afterAll(() => server.close())

const documented = new Set([200, 400, 401, 402, 403, 404, 409, 410, 413, 415, 422, 429, 431])

/** Bun's own limit on the request line plus headers (`--max-http-header-size`, default 16 KiB). */
const bunHeadLimit = 16 * 1024
/** Room for the headers fetch adds itself (host, user-agent, accept, content-length, ...). */
const clientHeaderSlack = 512

const routes = [
  ["GET", "/v1/wallet"],
  ["GET", "/v1/wallet/transactions"],
  ["GET", "/v1/hooks/categories"],
  ["GET", "/v1/hooks/search"],
  ["GET", "/v1/hooks/list"],
  ["GET", "/v1/hooks/{id}"],
  ["POST", "/v1/predict/upload"],
  ["POST", "/v1/predict"],
  ["GET", "/v1/predict/{id}"],
  ["GET", "/v1/webhooks"],
  ["PUT", "/v1/webhooks"],
  ["DELETE", "/v1/webhooks"],
  ["POST", "/v1/webhooks/rotate"],
  ["POST", "/v1/webhooks/test"],
  ["PUT", "/uploads/{id}"],
  ["POST", "/admin/accounts"],
  ["GET", "/admin/accounts/{id}"],
  ["PATCH", "/admin/accounts/{id}"],
  ["POST", "/admin/accounts/{id}/keys"],
  ["DELETE", "/admin/keys/{id}"],
  ["POST", "/admin/accounts/{id}/credits"],
  ["GET", "/admin/accounts/{id}/transactions"],
  ["PUT", "/admin/catalog/categories"],
  ["POST", "/admin/catalog/hooks"]
] as const

const nasty = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.constantFrom(
    "' OR 1=1 --",
    "'; DROP TABLE accounts; --",
    "../../etc/passwd",
    "%2e%2e%2f%2e%2e%2f",
    "hook_" + "f".repeat(32),
    "hook_" + "F".repeat(32),
    "pred_" + "0".repeat(32),
    "\u0000",
    "\ud83d\ude80".repeat(50),
    "null",
    "a".repeat(5_000),
    "<script>alert(1)</script>",
    "${jndi:ldap://x}",
    "%00%ff",
    "eyJ2IjoxfQ",
    "."
  )
)

const jsonValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.record({ url: nasty }),
  fc.record({ upload_id: nasty }),
  fc.record({ plan: nasty, monthly_balance: fc.oneof(fc.integer(), fc.double(), fc.constant(null)) }),
  fc.record({ bucket: nasty, amount: fc.oneof(fc.integer(), fc.double(), fc.string()) }),
  fc.array(fc.record({ slug: nasty, name: nasty }), { maxLength: 3 }),
  fc.constant(null)
)

const body = fc.oneof(
  fc.constant(undefined),
  jsonValue.map((value) => ({ text: JSON.stringify(value), type: "application/json" })),
  nasty.map((text) => ({ text, type: "application/json" })),
  nasty.map((text) => ({ text, type: "text/plain" })),
  nasty.map((text) => ({ text, type: "application/x-www-form-urlencoded" })),
  fc.constant({ text: JSON.stringify({ upload_id: "x".repeat(100_000) }), type: "application/json" }),
  fc.constant({ text: '{"a":'.repeat(2_000), type: "application/json" })
)

const request = fc.record({
  route: fc.constantFrom(...routes),
  wrongMethod: fc.boolean(),
  method: fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE"),
  id: nasty,
  query: fc.array(fc.tuple(fc.oneof(fc.constantFrom("q", "category", "cursor", "api_key", "key", "limit"), fc.string({ maxLength: 10 })), nasty), { maxLength: 3 }),
  body,
  auth: fc.constantFrom("valid", "none", "garbage", "admin"),
  hugeHeader: fc.boolean()
})

test("every answer to hostile input is documented, enveloped, and never moves credits wrongly", async () => {
  const before = await ledgerState(server.db, account.accountId)
  let charged = 0
  let sent = 0
  const statuses = new Map<number, number>()
  await fc.assert(
    fc.asyncProperty(request, async (r) => {
      const routeMethod = r.route[0]
      const template = r.route[1]
      const path = template.replace("{id}", encodeURIComponent(r.id))
      const query = r.query.length === 0 ? "" : "?" + r.query.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&")
      const headers: Record<string, string> = {}
      if (r.auth === "valid") headers.authorization = `Bearer ${account.key}`
      if (r.auth === "garbage") headers.authorization = `Bearer ${r.id.slice(0, 200)}`.replace(/[\r\n\u0000-\u001f\u007f-\uffff]/g, "")
      if (r.auth === "admin") headers.authorization = `Bearer ${server.adminToken}`
      if (r.hugeHeader) headers["x-filler"] = "x".repeat(8_000)
      if (r.body !== undefined) headers["content-type"] = r.body.type
      const method = r.wrongMethod ? r.method : routeMethod
      const response = await fetch(server.url + path + query, {
        method,
        headers,
        body: r.body === undefined || method === "GET" ? undefined : r.body.text
      })
      sent++
      const text = await response.text()
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1)
      expect(documented.has(response.status)).toBe(true)
      if (response.status === 431 && text === "") {
        // Over Bun's own limit the request never reaches Hookline: a bare 431, connection closed.
        const head = `${method} ${path}${query} HTTP/1.1\r\n` + Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("")
        expect(Buffer.byteLength(head)).toBeGreaterThan(bunHeadLimit - clientHeaderSlack)
        expect(response.headers.get("connection")).toBe("close")
        return
      }
      const requestId = response.headers.get("x-request-id")
      expect(requestId).not.toBeNull()
      if (response.status >= 400) {
        const parsed = JSON.parse(text) as { error: { type: string; message: string; request_id: string } }
        expect(typeof parsed.error.type).toBe("string")
        expect(typeof parsed.error.message).toBe("string")
        expect(parsed.error.request_id).toBe(requestId!)
        expect(response.headers.get("x-credits-charged") ?? "0").toBe("0")
      } else {
        charged += Number(response.headers.get("x-credits-charged") ?? "0")
      }
    }),
    { numRuns: 3_000 }
  )
  const after = await ledgerState(server.db, account.accountId)
  expect(after.monthly).toBe(after.journalMonthly)
  expect(after.topup).toBe(after.journalTopup)
  expect(after.pendingHolds).toBe(0)
  expect(before.monthly + before.topup - (after.monthly + after.topup)).toBe(charged)
  console.log(`fuzz: ${sent} requests over ${routes.length} routes; statuses ${JSON.stringify(Object.fromEntries(statuses))}`)
}, 240_000)
