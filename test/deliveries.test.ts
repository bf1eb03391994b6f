/** Webhooks: event selection, the delivery log with retry, endpoint health. */
import { beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { FetchHttpClient } from "effect/http"
import { randomBytes } from "node:crypto"
import { Webhook as StandardWebhook } from "standardwebhooks"
import { makeHooklineClient } from "../src/client.js"
import { type PredictionEventType, Webhooks } from "../src/Webhooks/Webhooks.js"
import { expectEnvelope } from "./support/envelope.js"
import { eventually } from "./support/receiver.js"
import { servicesRuntime } from "./support/runtime.js"
import {
  type ErrorBody,
  type OpenApiDocument,
  startTestServer,
  type TestServer,
  type WebhookBody,
  type WebhookDeliveryBody,
  type WebhookDeliveryPage,
  type WebhookSecretBody
} from "./support/server.js"
import { samplePrediction, type WebhookFixture, webhookFixture } from "./support/webhookFixture.js"

const env: Record<string, string> = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  WEBHOOK_ALLOW_INSECURE: "true",
  WEBHOOK_RETRY_SCHEDULE: "100ms,100ms",
  WEBHOOK_POLL_INTERVAL: "100ms",
  WEBHOOK_TIMEOUT: "1s",
  WEBHOOK_CLAIM_LEASE: "3s",
  WEBHOOK_SWEEP_INTERVAL: "200ms",
  WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64url")
}

const fixture = webhookFixture(env)
let server: TestServer
let runtime: WebhookFixture["runtime"]
const receiver = fixture.receiver
beforeAll(() => {
  server = fixture.server
  runtime = fixture.runtime
})

/** Writes an event into the outbox as the predictions room does; the delivery id, or null when not recorded. */
const enqueue = (accountId: string, type: PredictionEventType = "prediction.succeeded", on = runtime) =>
  on.runPromise(Effect.flatMap(Webhooks, (webhooks) => webhooks.enqueueEvent(accountId, type, samplePrediction())))

const withWebhook = async (url: string, events?: ReadonlyArray<string>) => {
  const account = await server.account()
  const put = await server.request<WebhookSecretBody>("/v1/webhooks", {
    method: "PUT",
    key: account.key,
    body: events === undefined ? { url } : { url, events }
  })
  expect(put.status).toBe(200)
  return { ...account, secret: put.body.secret }
}

const getDelivery = (key: string, id: string) => server.request<WebhookDeliveryBody>(`/v1/webhooks/deliveries/${id}`, { key })

const finished = (key: string, id: string) =>
  eventually(`delivery ${id} finished`, async () => {
    const { body } = await getDelivery(key, id)
    return body.status !== "pending" ? body : undefined
  })


describe("event selection", () => {
  test("a webhook receives only the events it selected; a later PUT without events keeps the selection", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url, ["prediction.failed"])
    expect((await server.request<WebhookBody>("/v1/webhooks", { key })).body.events).toEqual(["prediction.failed"])

    expect(await enqueue(accountId, "prediction.succeeded")).toBeNull()
    const failed = await enqueue(accountId, "prediction.failed")
    expect(failed).not.toBeNull()
    expect((await finished(key, failed!)).status).toBe("delivered")
    expect(target.requests.map((r) => JSON.parse(r.body).type)).toEqual(["prediction.failed"])

    const moved = await server.request<WebhookBody>("/v1/webhooks", { method: "PUT", key, body: { url: target.url } })
    expect(moved.body.events).toEqual(["prediction.failed"])
    const all = await server.request<WebhookBody>("/v1/webhooks", { method: "PUT", key, body: { url: target.url, events: ["*"] } })
    expect(all.body.events).toEqual(["*"])
    expect(await enqueue(accountId, "prediction.succeeded")).not.toBeNull()
  })

  test("unknown event types, an empty list or a non-list are 422 and change nothing", async () => {
    const target = receiver()
    const { key } = await withWebhook(target.url, ["prediction.succeeded", "prediction.succeeded"])
    expect((await server.request<WebhookBody>("/v1/webhooks", { key })).body.events).toEqual(["prediction.succeeded"])
    for (const events of [["prediction.exploded"], [], "prediction.failed", [42]]) {
      const response = await server.request("/v1/webhooks", { method: "PUT", key, body: { url: target.url, events } })
      expectEnvelope(response, 422, "validation_error")
      expect((response.body as ErrorBody).error.message).toContain("events")
    }
    expect((await server.request<WebhookBody>("/v1/webhooks", { key })).body.events).toEqual(["prediction.succeeded"])
  })
})

describe("the delivery log", () => {
  test("lists the account's deliveries newest first with their outcome, filters by status, pages with a cursor", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    const ok = await enqueue(accountId)
    await finished(key, ok!)
    target.answer(500)
    const bad = await enqueue(accountId)
    const failed = await finished(key, bad!)
    expect(failed).toMatchObject({
      object: "webhook_delivery",
      id: bad,
      event_type: "prediction.succeeded",
      status: "failed",
      attempts: 3,
      last_status_code: 500,
      last_error: "answered 500",
      next_attempt_at: null
    })
    expect(failed.event_id).toMatch(/^evt_[0-9a-f]{32}$/)
    expect(failed.completed_at).not.toBeNull()

    const all = await server.request<WebhookDeliveryPage>("/v1/webhooks/deliveries", { key })
    expect(all.status).toBe(200)
    expect(all.body.data.map((d) => d.id)).toEqual([bad!, ok!])
    expect(all.body.data[1]).toMatchObject({ status: "delivered", attempts: 1, last_status_code: 200, last_error: null })

    const delivered = await server.request<WebhookDeliveryPage>("/v1/webhooks/deliveries?status=delivered", { key })
    expect(delivered.body.data.map((d) => d.id)).toEqual([ok!])

    const first = await server.request<WebhookDeliveryPage>("/v1/webhooks/deliveries?limit=1", { key })
    expect(first.body.data.map((d) => d.id)).toEqual([bad!])
    expect(first.body.has_more).toBe(true)
    const second = await server.request<WebhookDeliveryPage>(
      `/v1/webhooks/deliveries?limit=1&cursor=${first.body.next_cursor}`,
      { key }
    )
    expect(second.body).toMatchObject({ has_more: false, next_cursor: null })
    expect(second.body.data.map((d) => d.id)).toEqual([ok!])

    // The typed client reads the same log.
    const viaClient = await Effect.runPromise(
      Effect.gen(function*() {
        const client = yield* makeHooklineClient({ baseUrl: server.url, apiKey: key })
        return yield* client.webhooks.deliveries({ query: { status: "failed" } })
      }).pipe(Effect.provide(FetchHttpClient.layer))
    )
    expect(viaClient.data.map((d) => d.id)).toEqual([bad!])
  })

  test("a bad, altered or other-filter cursor is 400; a bad status or limit is 422", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    await finished(key, (await enqueue(accountId))!)
    await finished(key, (await enqueue(accountId))!)
    const page = await server.request<WebhookDeliveryPage>("/v1/webhooks/deliveries?limit=1", { key })
    const cursor = page.body.next_cursor!
    const altered = cursor.slice(0, -2) + (cursor.endsWith("AA") ? "BB" : "AA")
    for (const query of [`cursor=nonsense`, `limit=1&cursor=${altered}`, `status=failed&limit=1&cursor=${cursor}`]) {
      expectEnvelope(await server.request(`/v1/webhooks/deliveries?${query}`, { key }), 400, "invalid_cursor")
    }
    // Another account's cursor does not work here either.
    const other = await server.account()
    expectEnvelope(await server.request(`/v1/webhooks/deliveries?limit=1&cursor=${cursor}`, { key: other.key }), 400, "invalid_cursor")
    expectEnvelope(await server.request("/v1/webhooks/deliveries?status=lost", { key }), 422, "validation_error")
    expectEnvelope(await server.request("/v1/webhooks/deliveries?limit=0", { key }), 422, "validation_error")
  })

  test("another account's delivery, an unknown or a malformed id are 404 on get and retry", async () => {
    const target = receiver()
    const owner = await withWebhook(target.url)
    const id = (await enqueue(owner.accountId))!
    await finished(owner.key, id)
    const stranger = await withWebhook(target.url)
    for (const path of [id, "dlv_0123456789abcdef0123456789abcdef", "not-an-id"]) {
      expectEnvelope(await getDelivery(stranger.key, path), 404, "not_found")
      expectEnvelope(await server.request(`/v1/webhooks/deliveries/${path}/retry`, { method: "POST", key: stranger.key }), 404, "not_found")
    }
    expect((await server.request<WebhookDeliveryPage>("/v1/webhooks/deliveries", { key: stranger.key })).body.data).toEqual([])
    expect(target.requests).toHaveLength(1)
  })

  test("retry sends a failed delivery again now: same webhook-id and body, verified by standardwebhooks", async () => {
    const target = receiver()
    const { accountId, key, secret } = await withWebhook(target.url)
    target.answer(500)
    const id = (await enqueue(accountId))!
    expect((await finished(key, id)).status).toBe("failed")
    expect(target.requests).toHaveLength(3)

    target.answer(200)
    const retried = await server.request<WebhookDeliveryBody>(`/v1/webhooks/deliveries/${id}/retry`, { method: "POST", key })
    expect(retried.status).toBe(200)
    expect(retried.body).toMatchObject({ id, status: "pending", completed_at: null })
    expect(retried.body.next_attempt_at).not.toBeNull()
    const done = await finished(key, id)
    expect(done).toMatchObject({ status: "delivered", attempts: 4, last_status_code: 200, last_error: null })

    expect(target.requests).toHaveLength(4)
    const [firstTry, again] = [target.requests[0], target.requests[3]]
    expect(again.headers["webhook-id"]).toBe(firstTry.headers["webhook-id"])
    expect(again.headers["webhook-id"]).toBe(done.event_id)
    expect(again.body).toBe(firstTry.body)
    expect(new StandardWebhook(secret).verify(again.body, again.headers)).toMatchObject({ id: done.event_id })

    // Delivered: not sent again.
    const twice = await server.request(`/v1/webhooks/deliveries/${id}/retry`, { method: "POST", key })
    expectEnvelope(twice, 422, "validation_error")
    expect((twice.body as ErrorBody).error.message).toContain("delivered already")
    // A later event to the same endpoint: once it is delivered, a redelivery queued by the refused retry would have been too.
    const later = await finished(key, (await enqueue(accountId))!)
    expect(later.status).toBe("delivered")
    expect(target.requests.map((request) => request.headers["webhook-id"]))
      .toEqual([done.event_id, done.event_id, done.event_id, done.event_id, later.event_id])
  })

  test("retry with the webhook disabled is 422 and sends nothing", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    target.answer(500)
    const id = (await enqueue(accountId))!
    await finished(key, id)
    await server.request("/v1/webhooks", { method: "DELETE", key })
    const response = await server.request(`/v1/webhooks/deliveries/${id}/retry`, { method: "POST", key })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toContain("disabled")
    expect((await getDelivery(key, id)).body.status).toBe("failed")
  })

  test("finished deliveries past the retention are swept with their attempts; pending ones are kept", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    const old = (await enqueue(accountId))!
    await finished(key, old)
    target.hang(true)
    const waiting = (await enqueue(accountId))!
    await server.db.query("UPDATE webhook_deliveries SET created_at = now() - interval '31 days' WHERE id = ANY($1)", [[old, waiting]])
    await eventually("the old delivery swept", async () => (await getDelivery(key, old)).status === 404)
    expectEnvelope(await getDelivery(key, old), 404, "not_found")
    const attempts = await server.db.query("SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id = $1", [old])
    expect(attempts.rows[0].n).toBe(0)
    expect((await getDelivery(key, waiting)).status).toBe(200)
    target.hang(false)
  })
})

describe("endpoint health", () => {
  test("410 Gone fails the delivery and disables the webhook at once; a PUT enables it again", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    target.answer(410)
    const id = (await enqueue(accountId))!
    expect(await finished(key, id)).toMatchObject({ status: "failed", attempts: 1, last_status_code: 410 })
    const webhook = await server.request<WebhookBody>("/v1/webhooks", { key })
    expect(webhook.body).toMatchObject({ configured: false, disabled_reason: "gone", url: target.url })
    expect(Date.parse(webhook.body.disabled_at!)).toBeGreaterThan(Date.now() - 60_000)
    expect(await enqueue(accountId)).toBeNull()

    target.answer(200)
    const again = await server.request<WebhookBody>("/v1/webhooks", { method: "PUT", key, body: { url: target.url } })
    expect(again.body).toMatchObject({ configured: true, disabled_reason: null, disabled_at: null })
    expect((await finished(key, (await enqueue(accountId))!)).status).toBe("delivered")
  })

  test("a webhook failing for WEBHOOK_DISABLE_AFTER is disabled on its next failure; a success ends the streak", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    target.answer(500)
    await finished(key, (await enqueue(accountId))!)
    const streak = await server.db.query("SELECT failing_since FROM webhooks WHERE account_id = $1", [accountId])
    expect(streak.rows[0].failing_since).not.toBeNull()
    expect((await server.request<WebhookBody>("/v1/webhooks", { key })).body.configured).toBe(true)

    // A success clears the streak.
    target.answer(200)
    await finished(key, (await enqueue(accountId))!)
    const cleared = await server.db.query("SELECT failing_since FROM webhooks WHERE account_id = $1", [accountId])
    expect(cleared.rows[0].failing_since).toBeNull()

    // Failing since more than the default 5 days: the next failed attempt disables it.
    target.answer(503)
    await server.db.query("UPDATE webhooks SET failing_since = now() - interval '5 days 1 minute' WHERE account_id = $1", [accountId])
    const id = (await enqueue(accountId))!
    await eventually("the webhook disabled", async () =>
      (await server.request<WebhookBody>("/v1/webhooks", { key })).body.disabled_reason === "failing")
    expect(await finished(key, id)).toMatchObject({ status: "failed", last_error: "webhook disabled" })
    expect((await server.request<WebhookBody>("/v1/webhooks", { key })).body).toMatchObject({ configured: false })
  })

  test("Retry-After on a 429 or 503 sets the next wait, within the schedule's shortest and longest", async () => {
    // A server of its own (and database), so no dispatcher with the other schedule takes its deliveries.
    const slowEnv = { ...env, WEBHOOK_RETRY_SCHEDULE: "100ms,5s,20s" }
    const slow = await startTestServer(slowEnv)
    const slowRuntime = servicesRuntime(slow.databaseUrl, { ...slowEnv, DATA_DIR: slow.dataDir })
    try {
      const target = receiver()
      const account = await slow.account()
      await slow.request("/v1/webhooks", { method: "PUT", key: account.key, body: { url: target.url } })
      const waits = async (status: number, retryAfter: string) => {
        target.answer(status)
        target.headers({ "retry-after": retryAfter })
        const id = (await enqueue(account.accountId, "prediction.succeeded", slowRuntime))!
        const row = await eventually(`first attempt of ${id}`, async () => {
          const { rows } = await slow.db.query(
            `SELECT EXTRACT(EPOCH FROM d.next_attempt_at - a.attempted_at) * 1000 AS wait_ms
               FROM webhook_deliveries d JOIN webhook_attempts a ON a.delivery_id = d.id
              WHERE d.id = $1 AND d.claim_token IS NULL`,
            [id]
          )
          return rows[0]
        })
        // Stop the delivery so it is not attempted again while the next case runs.
        await slow.db.query("UPDATE webhook_deliveries SET status = 'failed' WHERE id = $1", [id])
        return Math.round(Number(row.wait_ms))
      }
      expect(await waits(503, "2")).toBe(2_000)
      expect(await waits(429, "3600")).toBe(20_000)
      expect(await waits(429, "0")).toBe(100)
      expect(await waits(503, new Date(Date.now() + 60 * 60_000).toUTCString())).toBe(20_000)
      // Without Retry-After (or on another status) the schedule decides.
      expect(await waits(500, "2")).toBe(100)
    } finally {
      await slowRuntime.dispose()
      await slow.close()
    }
  })
})

test("the new routes are in /openapi.json", async () => {
  const spec = await server.request<OpenApiDocument>("/openapi.json")
  expect(Object.keys(spec.body.paths)).toEqual(
    expect.arrayContaining(["/v1/webhooks/deliveries", "/v1/webhooks/deliveries/{id}", "/v1/webhooks/deliveries/{id}/retry"])
  )
})
