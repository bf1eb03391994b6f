/**
 * Security properties the README's security review relies on: no secret reaches a log line or a span, even
 * at the most verbose level and with the redaction net off; keys and upload tokens are stored
 * only as SHA-256 hashes and webhook secrets only encrypted; malformed, unknown and revoked keys
 * are all 401 invalid_api_key, unknown and revoked ones with one message (the timings are
 * measured and printed, not asserted).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Logger } from "effect"
import { randomBytes } from "node:crypto"
import { smallClip } from "./support/process.js"
import { eventually, startReceiver } from "./support/receiver.js"
import { type ApiKeyBody, startTestServer, type TestServer, type UploadLink, type WebhookSecretBody, type WebhookTestBody } from "./support/server.js"
import { collectSpans } from "./support/spans.js"

const { spans, tracer } = collectSpans()
const logLines: Array<string> = []

let server: TestServer
const receiver = startReceiver()

beforeAll(async () => {
  server = await startTestServer(
    { LOG_LEVEL: "All", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true", AUTH_CACHE_TTL: "0 millis", OTEL_TRACES_SAMPLER: "always_on" },
    // Every level, the plain JSON logger without the redaction net: clean by construction or not at all.
    { tracer, logger: Logger.map(Logger.formatJson, (line) => logLines.push(line)) }
  )
})
afterAll(async () => {
  await receiver.stop()
  await server.close()
})

describe("secrets stay out of logs and spans", () => {
  test("keys, the admin token, webhook secrets and upload tokens appear in no log line and no span attribute", async () => {
    const { accountId, key, keyId } = await server.account({ plan: "pro", monthly_balance: 100 })
    const secrets: Array<string> = [key, server.adminToken]

    // The key in the bearer header and (refused) in the query string; a malformed and a revoked one.
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    const inQuery = await server.request(`/v1/wallet?api_key=${key}`, { key })
    expect(inQuery.status).toBe(401)
    expect((await server.request(`/v1/wallet?key=${key}`)).status).toBe(401)
    expect((await server.request("/v1/wallet", { headers: { authorization: `Basic ${key}` } })).status).toBe(401)
    const revoked = await server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, { method: "POST", body: {} })
    secrets.push(revoked.body.api_key)
    expect((await server.admin(`/admin/keys/${revoked.body.id}`, { method: "DELETE" })).status).toBe(200)
    expect((await server.request("/v1/wallet", { key: revoked.body.api_key })).status).toBe(401)

    // Webhook secrets: issued, rotated, used to sign a test send and a real delivery.
    const created = await server.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key, body: { url: receiver.url } })
    const rotated = await server.request<WebhookSecretBody>("/v1/webhooks/rotate", { method: "POST", key })
    secrets.push(created.body.secret, rotated.body.secret)
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)

    // An upload link: its token is the only credential of the PUT.
    const link = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })
    const token = new URL(link.body.upload_url).pathname.split("/").pop()!
    secrets.push(token)
    const put = await fetch(`${server.url}/uploads/${token}`, { method: "PUT", body: await smallClip() })
    expect(put.status).toBe(200)
    await eventually("the prediction's event was delivered", () =>
      receiver.requests.some((r) => r.body.includes(link.body.prediction_id) && r.answered === 200))

    // What is stored: hashes of the key and the token, the webhook secret only as ciphertext.
    const stored = await server.db.query("SELECT key_hash FROM api_keys WHERE id = $1", [keyId])
    expect(stored.rows[0].key_hash).toBe(new Bun.CryptoHasher("sha256").update(key).digest("hex"))
    const upload = await server.db.query("SELECT * FROM uploads WHERE id = $1", [link.body.upload_id])
    const webhook = await server.db.query("SELECT * FROM webhooks WHERE account_id = $1", [accountId])
    const rows = JSON.stringify([upload.rows, webhook.rows, stored.rows])
    for (const secret of secrets) expect(rows.includes(secret)).toBe(false)

    const logs = logLines.join("\n")
    const attributes = JSON.stringify(spans.map((span) => [span.name, [...span.attributes]]))
    // Debug lines were written too, and the refused request was logged (its access line), without the key.
    expect(logLines.some((line) => line.includes('"level":"DEBUG"'))).toBe(true)
    expect(logLines.some((line) => line.includes(inQuery.headers.get("x-request-id")!))).toBe(true)
    for (const secret of secrets) {
      expect(logs.includes(secret)).toBe(false)
      expect(attributes.includes(secret)).toBe(false)
    }
    expect(logs.includes("whsec_")).toBe(false)
    expect(logs.includes("hkl_live_")).toBe(false)
    console.log(`secrets: ${logLines.length} log lines at level All and ${spans.length} spans hold none of ${secrets.length} secrets`)
  }, 60_000)
})

describe("401s", () => {
  test("malformed, unknown and revoked keys are all 401 invalid_api_key, unknown and revoked with one message; timings printed, not compared", async () => {
    const { accountId, key } = await server.account({ plan: "pro" })
    const revoked = await server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, { method: "POST", body: {} })
    await server.admin(`/admin/keys/${revoked.body.id}`, { method: "DELETE" })
    const kinds = {
      valid: () => key,
      malformed: () => `nope-${randomBytes(8).toString("hex")}`,
      unknown: () => `hkl_live_${randomBytes(24).toString("base64url")}`,
      revoked: () => revoked.body.api_key
    }
    const timings = new Map<string, Array<number>>(Object.keys(kinds).map((kind) => [kind, []]))
    const bodies = new Map<string, Set<string>>(Object.keys(kinds).map((kind) => [kind, new Set()]))
    // Interleaved, so that drift in the machine's load touches every kind alike.
    for (let round = 0; round < 150; round++) {
      for (const [kind, makeKey] of Object.entries(kinds)) {
        const started = performance.now()
        const response = await fetch(`${server.url}/v1/wallet`, { headers: { authorization: `Bearer ${makeKey()}` } })
        const body = await response.json()
        timings.get(kind)!.push(performance.now() - started)
        expect(response.status).toBe(kind === "valid" ? 200 : 401)
        if (kind !== "valid") bodies.get(kind)!.add(`${response.status} ${body.error.type} ${body.error.message}`)
      }
    }
    expect([...bodies.get("unknown")!]).toEqual(["401 invalid_api_key Unknown or revoked API key."])
    expect([...bodies.get("revoked")!]).toEqual(["401 invalid_api_key Unknown or revoked API key."])
    expect([...bodies.get("malformed")!]).toEqual(["401 invalid_api_key Malformed API key: expected Authorization: Bearer hkl_live_<key>."])
    const median = (values: Array<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
    const summary = [...timings].map(([kind, values]) => `${kind} ${median(values).toFixed(2)} ms`).join(", ")
    console.log(`401 timing (median of 150 each, key cache off, over loopback HTTP): ${summary}`)
  }, 60_000)
})
