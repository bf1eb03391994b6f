/**
 * Cross-account isolation: a second account's key, holding every scope and credits, tries every
 * /v1 route with the first account's ids, cursors and idempotency keys. It gets 404 or only its
 * own data, is never charged, and the first account's state does not move. Predictions are also
 * private to the key that created them within one account.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { smallClip } from "./support/process.js"
import { eventually, startReceiver } from "./support/receiver.js"
import {
  type ApiKeyBody,
  type ErrorBody,
  ledgerState,
  type PredictionBody,
  startTestServer,
  type TestServer,
  type TransactionPage,
  type UploadLink,
  type WebhookBody,
  type WebhookSecretBody
} from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"

let server: TestServer
const receiver = startReceiver()
type Account = { accountId: string; key: string; keyId: string }
let owner: Account
let intruder: Account
let ownerSecondKey: string
let finished: { predictionId: string; uploadId: string }
let waiting: { predictionId: string; uploadId: string; uploadUrl: string }
let ownerHistoryCursor: string

/** Everything of the owner an intruder could try to read or change. */
const ownerState = async () => ({
  ledger: await ledgerState(server.db, owner.accountId),
  journal: (await server.db.query("SELECT id, amount FROM credit_journal WHERE account_id = $1 ORDER BY seq", [owner.accountId])).rows,
  predictions: (await server.db.query("SELECT id, status, hold_id FROM predictions WHERE account_id = $1 ORDER BY id", [owner.accountId])).rows,
  webhook: (await server.db.query("SELECT url, enabled, secret_ciphertext FROM webhooks WHERE account_id = $1", [owner.accountId])).rows
})

beforeAll(async () => {
  server = await startTestServer({ WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true" })
  owner = await server.account({ plan: "pro", monthly_balance: 100 })
  intruder = await server.account({ plan: "enterprise", monthly_balance: 100 })
  ownerSecondKey = (await server.admin<ApiKeyBody>(`/admin/accounts/${owner.accountId}/keys`, { method: "POST", body: {} })).body.api_key

  expect((await server.request("/v1/webhooks", { method: "PUT", key: owner.key, body: { url: receiver.url } })).status).toBe(200)
  // A prediction that ran to the end, and one still waiting for its file.
  const clip = await smallClip()
  const link = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key: owner.key })
  // The test server listens on a random port; the link's path is what matters.
  expect((await fetch(server.url + new URL(link.body.upload_url).pathname, { method: "PUT", body: clip })).status).toBe(200)
  finished = { predictionId: link.body.prediction_id, uploadId: link.body.upload_id }
  await eventually("the owner's prediction succeeded", async () =>
    (await server.request<PredictionBody>(`/v1/predict/${finished.predictionId}`, { key: owner.key })).body.status === "succeeded")
  const second = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key: owner.key, headers: { "idempotency-key": "shared-key-1" } })
  waiting = { predictionId: second.body.prediction_id, uploadId: second.body.upload_id, uploadUrl: second.body.upload_url }
  // A page of history with a next cursor.
  const history = await server.request<TransactionPage>("/v1/wallet/transactions?limit=1", { key: owner.key })
  expect(history.body.has_more).toBe(true)
  ownerHistoryCursor = history.body.next_cursor!
}, 60_000)

afterAll(async () => {
  await receiver.stop()
  await server.close()
})

describe("another account's key", () => {
  test("tries every route with the owner's ids: 404 or its own data, never charged, the owner's state unchanged", async () => {
    const before = await ownerState()
    const intruderBefore = await ledgerState(server.db, intruder.accountId)
    const key = intruder.key

    // Predictions: not visible, and the owner's upload id cannot be started from here.
    expectEnvelope(await server.request(`/v1/predict/${finished.predictionId}`, { key }), 404, "not_found")
    expectEnvelope(await server.request(`/v1/predict/${waiting.predictionId}`, { key }), 404, "not_found")
    expectEnvelope(await server.request("/v1/predict", { method: "POST", key, body: { upload_id: finished.uploadId } }), 404, "not_found")
    expectEnvelope(await server.request("/v1/predict", { method: "POST", key, body: { upload_id: waiting.uploadId } }), 404, "not_found")

    // The same Idempotency-Key as the owner's upload link makes the intruder its own link.
    const own = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key, headers: { "idempotency-key": "shared-key-1" } })
    expect(own.status).toBe(200)
    expect(own.body.prediction_id).not.toBe(waiting.predictionId)
    expect(own.body.upload_url).not.toBe(waiting.uploadUrl)

    // Webhooks: the intruder sees and changes only its own.
    expect((await server.request("/v1/webhooks", { key })).body).toEqual({ object: "webhook", url: null, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
    expectEnvelope(await server.request("/v1/webhooks/rotate", { method: "POST", key }), 422, "validation_error")
    expectEnvelope(await server.request("/v1/webhooks/test", { method: "POST", key }), 422, "validation_error")
    expect((await server.request<WebhookBody>("/v1/webhooks", { method: "DELETE", key })).body.configured).toBe(false)
    const set = await server.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key, body: { url: `${receiver.url}/intruder` } })
    expect(set.status).toBe(200)
    expect(typeof set.body.secret).toBe("string")
    expect((await server.request("/v1/webhooks/rotate", { method: "POST", key })).status).toBe(200)
    expect((await server.request("/v1/webhooks", { method: "DELETE", key })).body).toMatchObject({ configured: false })

    // Credit history: only its own rows; the owner's cursor is refused.
    const history = await server.request<TransactionPage>("/v1/wallet/transactions", { key })
    expect(history.status).toBe(200)
    const ownerJournalIds = new Set(before.journal.map((row: { id: string }) => row.id))
    expect(history.body.data.length).toBeGreaterThan(0)
    expect(history.body.data.some((row) => ownerJournalIds.has(row.id))).toBe(false)
    expectEnvelope(await server.request(`/v1/wallet/transactions?cursor=${encodeURIComponent(ownerHistoryCursor)}`, { key }), 400, "invalid_cursor")
    expect((await server.request("/v1/wallet", { key })).body).toMatchObject({ monthly_balance: 100, topup_balance: 0 })

    // A user key is no admin token.
    expectEnvelope(await server.request(`/admin/accounts/${owner.accountId}`, { key }), 401, "invalid_api_key")
    expectEnvelope(await server.request(`/admin/accounts/${owner.accountId}/transactions`, { key }), 401, "invalid_api_key")

    expect(await ownerState()).toEqual(before)
    expect(await ledgerState(server.db, intruder.accountId)).toEqual(intruderBefore)
    // The owner's webhook still answers for the owner, with the secret it had.
    expect((await server.request("/v1/webhooks", { key: owner.key })).body).toEqual({ object: "webhook", url: receiver.url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null })
  })

  test("a prediction is private to the key that created it, even within its account", async () => {
    expect((await server.request(`/v1/predict/${finished.predictionId}`, { key: owner.key })).status).toBe(200)
    expectEnvelope(await server.request(`/v1/predict/${finished.predictionId}`, { key: ownerSecondKey }), 404, "not_found")
    expectEnvelope(
      await server.request("/v1/predict", { method: "POST", key: ownerSecondKey, body: { upload_id: waiting.uploadId } }),
      404,
      "not_found"
    )
  })

  test("ids that do not exist and ids of another kind answer exactly like another account's: 404", async () => {
    const key = intruder.key
    const unknown = await server.request(`/v1/predict/pred_${"0".repeat(32)}`, { key })
    const foreign = await server.request(`/v1/predict/${finished.predictionId}`, { key })
    expectEnvelope(unknown, 404, "not_found")
    expectEnvelope(foreign, 404, "not_found")
    expect((foreign.body as ErrorBody).error.message.replace(finished.predictionId, "ID")).toBe((unknown.body as ErrorBody).error.message.replace(`pred_${"0".repeat(32)}`, "ID"))
    expectEnvelope(await server.request(`/v1/predict/${finished.uploadId}`, { key: owner.key }), 404, "not_found")
  })
})
