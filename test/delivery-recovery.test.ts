/** Recovering webhook deliveries after an outage: every failed delivery since a time, sent again in order, at a pace. */
import { beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { Webhooks } from "../src/Webhooks/Webhooks.js"
import { expectEnvelope } from "./support/envelope.js"
import { eventually } from "./support/receiver.js"
import type { TestServer, WebhookDeliveryBody, WebhookDeliveryPage, WebhookSecretBody } from "./support/server.js"
import { samplePrediction, type WebhookFixture, webhookFixture } from "./support/webhookFixture.js"

const paceMs = 300
const env: Record<string, string> = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  WEBHOOK_ALLOW_INSECURE: "true",
  WEBHOOK_RETRY_SCHEDULE: "50ms",
  WEBHOOK_POLL_INTERVAL: "50ms",
  WEBHOOK_TIMEOUT: "1s",
  WEBHOOK_RECOVER_PACE: `${paceMs}ms`,
  WEBHOOK_DELIVERY_RETENTION: "2 hours",
  WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64url")
}

const fixture = webhookFixture(env)
let server: TestServer
let runtime: WebhookFixture["runtime"]
beforeAll(() => {
  server = fixture.server
  runtime = fixture.runtime
})

interface RecoveryBody {
  readonly object: "webhook_recovery"
  readonly since: string
  readonly queued: number
  readonly last_attempt_at: string | null
}

const enqueue = (accountId: string) =>
  runtime.runPromise(Effect.flatMap(Webhooks, (webhooks) => webhooks.enqueueEvent(accountId, "prediction.succeeded", samplePrediction())))

const withWebhook = async (url: string) => {
  const account = await server.account()
  const put = await server.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key: account.key, body: { url } })
  expect(put.status).toBe(200)
  return account
}

const finished = (key: string, id: string) =>
  eventually(`delivery ${id} finished`, async () => {
    const { body } = await server.request<WebhookDeliveryBody>(`/v1/webhooks/deliveries/${id}`, { key })
    return body.status !== "pending" ? body : undefined
  })

/** Enqueues an event and waits for its delivery to end; the delivery. */
const deliveryOf = async (accountId: string, key: string) => {
  const id = await enqueue(accountId)
  if (id === null) throw new Error("the event was not recorded")
  return finished(key, id)
}

const recover = (key: string, since: string) =>
  server.request<RecoveryBody>("/v1/webhooks/deliveries/recover", { method: "POST", key, body: { since } })

describe("recovering failed deliveries", () => {
  test("every failed delivery since a time is sent again, oldest first, paced, with its own webhook-id; delivered ones and other accounts' are left", async () => {
    const target = fixture.receiver()
    const since = new Date(Date.now() - 1_000).toISOString()
    const { accountId, key } = await withWebhook(target.url)
    const delivered = await deliveryOf(accountId, key)
    expect(delivered.status).toBe("delivered")
    target.answer(500)
    const failed = [await deliveryOf(accountId, key), await deliveryOf(accountId, key), await deliveryOf(accountId, key)]
    expect(failed.map((delivery) => delivery.status)).toEqual(["failed", "failed", "failed"])
    // Another account's failed delivery, to a receiver of its own.
    const otherTarget = fixture.receiver()
    otherTarget.answer(500)
    const other = await withWebhook(otherTarget.url)
    const otherFailed = await deliveryOf(other.accountId, other.key)

    target.answer(200)
    const before = target.requests.length
    const answer = await recover(key, since)
    expect(answer.status).toBe(200)
    expect(answer.body).toMatchObject({ object: "webhook_recovery", since, queued: 3 })
    expect(answer.body.last_attempt_at).not.toBeNull()

    const resent = await eventually("the recovered deliveries", async () => {
      const later = target.requests.slice(before)
      return later.length >= 3 ? later : undefined
    })
    expect(resent.map((request) => request.headers["webhook-id"])).toEqual(failed.map((delivery) => delivery.event_id))
    // Paced: each goes out no earlier than one pace after the one before it.
    for (let i = 1; i < resent.length; i++) expect(resent[i].receivedAt - resent[i - 1].receivedAt).toBeGreaterThanOrEqual(paceMs - 20)
    for (const delivery of failed) expect((await finished(key, delivery.id)).status).toBe("delivered")

    // Nothing else went out: not the delivered one, not a second time.
    const page = await server.request<WebhookDeliveryPage>("/v1/webhooks/deliveries", { key })
    expect(page.body.data.find((delivery) => delivery.id === delivered.id)).toMatchObject({ status: "delivered", attempts: 1 })
    expect((await recover(key, since)).body.queued).toBe(0)
    expect(target.requests.length).toBe(before + 3)
    // The other account's delivery is still failed, its receiver asked nothing more.
    const otherNow = await server.request<WebhookDeliveryBody>(`/v1/webhooks/deliveries/${otherFailed.id}`, { key: other.key })
    expect(otherNow.body.status).toBe("failed")
  })

  test("a delivery dropped while the webhook was disabled is recovered once it is enabled again; not while it is disabled", async () => {
    const target = fixture.receiver()
    const since = new Date(Date.now() - 1_000).toISOString()
    const { accountId, key } = await withWebhook(target.url)
    // The first attempt hangs past WEBHOOK_TIMEOUT; the webhook is disabled meanwhile, so the next one is dropped.
    target.hang(true)
    const id = await enqueue(accountId)
    await eventually("the first attempt", async () => (target.requests.length === 1 ? true : undefined))
    expect((await server.request("/v1/webhooks", { method: "DELETE", key })).status).toBe(200)
    target.hang(false)
    const dropped = await finished(key, id!)
    expect(dropped).toMatchObject({ status: "failed", last_error: "webhook disabled" })
    expectEnvelope(await recover(key, since), 422, "validation_error")
    expect((await finished(key, id!)).status).toBe("failed")

    expect((await server.request("/v1/webhooks", { method: "PUT", key, body: { url: target.url } })).status).toBe(200)
    const recovered = await recover(key, since)
    expect(recovered.body).toMatchObject({ object: "webhook_recovery", queued: 1 })
    expect((await finished(key, id!)).status).toBe("delivered")
    expect(target.requests.at(-1)?.headers["webhook-id"]).toBe(dropped.event_id)
  })

  test("since older than the retention, in the future or malformed is 422 and queues nothing; without a key 401", async () => {
    const target = fixture.receiver()
    target.answer(500)
    const { accountId, key } = await withWebhook(target.url)
    const failed = await deliveryOf(accountId, key)
    const tooOld = await recover(key, new Date(Date.now() - 3 * 3_600_000).toISOString())
    expectEnvelope(tooOld, 422, "validation_error")
    expect(JSON.stringify(tooOld.body)).toContain("retention")
    expectEnvelope(await recover(key, new Date(Date.now() + 60_000).toISOString()), 422, "validation_error")
    expectEnvelope(await recover(key, "yesterday"), 422, "validation_error")
    const missing = await server.request("/v1/webhooks/deliveries/recover", { method: "POST", key, body: {} })
    expectEnvelope(missing, 422, "validation_error")
    const anonymous = await server.request("/v1/webhooks/deliveries/recover", { method: "POST", body: { since: new Date().toISOString() } })
    expectEnvelope(anonymous, 401, "invalid_api_key")
    expect((await finished(key, failed.id)).status).toBe("failed")
  })

  test("the admin API recovers an account's deliveries; an unknown account is 404", async () => {
    const target = fixture.receiver()
    target.answer(500)
    const since = new Date(Date.now() - 1_000).toISOString()
    const { accountId, key } = await withWebhook(target.url)
    const failed = await deliveryOf(accountId, key)
    target.answer(200)
    const answer = await server.request<RecoveryBody>(`/admin/accounts/${accountId}/webhooks/deliveries/recover`, {
      method: "POST",
      key: server.adminToken,
      body: { since }
    })
    expect(answer.status).toBe(200)
    expect(answer.body.queued).toBe(1)
    expect((await finished(key, failed.id)).status).toBe("delivered")
    const unknown = await server.request("/admin/accounts/acct_0123456789abcdef0123456789abcdef/webhooks/deliveries/recover", {
      method: "POST",
      key: server.adminToken,
      body: { since }
    })
    expectEnvelope(unknown, 404, "not_found")
  })
})
