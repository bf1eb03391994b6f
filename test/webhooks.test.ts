import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Duration, Effect, Layer, Logger, ManagedRuntime, References, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { randomBytes } from "node:crypto"
import { readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { Accounts } from "../src/Admin/Accounts.js"
import { makeSealer } from "../src/Crypto.js"
import { ServicesLive } from "../src/App.js"
import { Webhook as StandardWebhook } from "standardwebhooks"
import { Prediction } from "../src/Predictions/Api.js"
import { DatabaseMode, SqlLive } from "../src/Sql.js"
import { parseRetrySchedule } from "../src/Webhooks/Config.js"
import { DispatcherLive } from "../src/Webhooks/Dispatcher.js"
import { makeSecretBox } from "../src/Webhooks/SecretBox.js"
import { sign } from "../src/Webhooks/Signing.js"
import { checkUrlShape, refusedRange } from "../src/Webhooks/UrlPolicy.js"
import { type PredictionEventType, Webhooks } from "../src/Webhooks/Webhooks.js"
import { ffmpegPath } from "./support/clips.js"
import { closedPortUrl, eventually, type ReceivedRequest, type Receiver, startReceiver } from "./support/receiver.js"
import { servicesRuntime } from "./support/runtime.js"
import { samplePrediction } from "./support/webhookFixture.js"
import {
  type ErrorBody,
  type PredictionBody,
  startTestServer,
  type TestServer,
  type UploadLink,
  type WebhookBody,
  type WebhookEvent,
  type WebhookSecretBody,
  type WebhookTestBody
} from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"
import { tempDir } from "./support/tempDirs.js"

/** Every server of this file shares one key, so servers on one database read each other's secrets. */
const webhookSecretKey = randomBytes(32).toString("base64url")

/** Loopback receivers, plain http, retries in a few hundred milliseconds. */
const env: Record<string, string> = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  WEBHOOK_ALLOW_INSECURE: "true",
  WEBHOOK_RETRY_SCHEDULE: "100ms,100ms,100ms",
  WEBHOOK_POLL_INTERVAL: "100ms",
  WEBHOOK_TIMEOUT: "1s",
  WEBHOOK_CLAIM_LEASE: "3s",
  WEBHOOK_SECRET_KEY: webhookSecretKey,
  PUBLIC_BASE_URL: "https://api.hookline.example"
}

/** Verifies a received request with the third-party Standard Webhooks verifier. */
const verify = (secret: string, request: ReceivedRequest, body = request.body): unknown =>
  new StandardWebhook(secret).verify(body, request.headers)

const verifies = (secret: string, request: ReceivedRequest, body = request.body): boolean => {
  try {
    verify(secret, request, body)
    return true
  } catch {
    return false
  }
}

/** Domain services on a server's database, to write events into the outbox as other rooms do. */
const outbox = (server: TestServer) => {
  const runtime = servicesRuntime(server.databaseUrl, { ...env, DATA_DIR: server.dataDir })
  return {
    enqueue: (accountId: string, type: PredictionEventType = "prediction.succeeded", data: Prediction = samplePrediction()) =>
      runtime.runPromise(Effect.flatMap(Webhooks, (webhooks) => webhooks.enqueueEvent(accountId, type, data))),
    /** Enqueues inside a transaction that then rolls back. */
    enqueueAndRollBack: (accountId: string) =>
      runtime.runPromise(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const webhooks = yield* Webhooks
          yield* Effect.gen(function*() {
            yield* webhooks.enqueueEvent(accountId, "prediction.succeeded", samplePrediction())
            return yield* Effect.fail("the state change failed")
          }).pipe(sql.withTransaction, Effect.ignore)
        })
      ),
    dispose: () => runtime.dispose()
  }
}

const deliveryOf = async (server: TestServer, deliveryId: string) => {
  const { rows } = await server.db.query(
    "SELECT status, attempts, event_id, last_status_code, last_error, completed_at, claim_token FROM webhook_deliveries WHERE id = $1",
    [deliveryId]
  )
  return rows[0]
}

const attemptsOf = async (server: TestServer, deliveryId: string) => {
  const { rows } = await server.db.query(
    "SELECT attempt, dispatcher, status_code, duration_ms, error FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id",
    [deliveryId]
  )
  return rows
}

const delivered = (server: TestServer, deliveryId: string) =>
  eventually(`delivery ${deliveryId} finished`, async () => {
    const row = await deliveryOf(server, deliveryId)
    return row.status !== "pending" ? row : undefined
  })

let server: TestServer
let events: ReturnType<typeof outbox>
const receivers: Array<Receiver> = []
const receiver = () => {
  const started = startReceiver()
  receivers.push(started)
  return started
}

beforeAll(async () => {
  server = await startTestServer(env)
  events = outbox(server)
})
afterAll(async () => {
  await events.dispose()
  await server.close()
})
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.stop()))
})

/** A new account with its webhook pointing at `url`; returns the key and the secret issued. */
const withWebhook = async (url: string, target: TestServer = server) => {
  const account = await target.account()
  const put = await target.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key: account.key, body: { url } })
  expect(put.status).toBe(200)
  return { ...account, secret: put.body.secret }
}

describe("the webhook resource", () => {
  test("before any PUT the account has no webhook", async () => {
    const { key } = await server.account()
    const response = await server.request("/v1/webhooks", { key })
    expect(response.status).toBe(200)
    expect(response.body).toEqual({ object: "webhook", url: null, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
  })

  test("the first PUT creates the webhook and returns its secret, once; the database holds it encrypted", async () => {
    const { accountId, key } = await server.account()
    const url = "http://127.0.0.1:9/first"
    const created = await server.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key, body: { url } })
    expect(created.status).toBe(200)
    expect(created.body).toEqual({ object: "webhook", url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null, secret: expect.any(String) })
    const secret: string = created.body.secret
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    expect(Buffer.from(secret.slice("whsec_".length), "base64")).toHaveLength(32)

    expect((await server.request("/v1/webhooks", { key })).body).toEqual({ object: "webhook", url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null })

    const { rows } = await server.db.query("SELECT * FROM webhooks WHERE account_id = $1", [accountId])
    const dump = JSON.stringify(rows)
    expect(dump).not.toContain(secret.slice("whsec_".length))
    expect(dump).not.toContain(Buffer.from(secret.slice("whsec_".length), "base64").toString("hex"))
    expect(rows[0].secret_ciphertext).toMatch(/^v1\./)
  })

  test("a later PUT changes the url and keeps the secret, which it does not return", async () => {
    const target = receiver()
    const { key, secret } = await withWebhook("http://127.0.0.1:9/old")
    const updated = await server.request<WebhookBody>("/v1/webhooks", { method: "PUT", key, body: { url: target.url } })
    expect(updated.status).toBe(200)
    expect(updated.body).toEqual({ object: "webhook", url: target.url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null })
    expect("secret" in updated.body).toBe(false)

    const sent = await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })
    expect(sent.body.delivered).toBe(true)
    expect(verifies(secret, target.requests[0])).toBe(true)
  })

  test("DELETE sets configured false and keeps url and secret; a PUT enables it again", async () => {
    const target = receiver()
    const { accountId, key, secret } = await withWebhook(target.url)
    const before = (await server.db.query("SELECT secret_ciphertext FROM webhooks WHERE account_id = $1", [accountId])).rows[0]

    const deleted = await server.request("/v1/webhooks", { method: "DELETE", key })
    expect(deleted.status).toBe(200)
    expect(deleted.body).toEqual({ object: "webhook", url: target.url, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
    expect((await server.request("/v1/webhooks", { key })).body).toEqual({ object: "webhook", url: target.url, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
    const after = (await server.db.query("SELECT secret_ciphertext FROM webhooks WHERE account_id = $1", [accountId])).rows[0]
    expect(after).toEqual(before)

    expectEnvelope(await server.request("/v1/webhooks/test", { method: "POST", key }), 422, "validation_error")
    expect(await events.enqueue(accountId)).toBeNull()

    const again = await server.request("/v1/webhooks", { method: "PUT", key, body: { url: target.url } })
    expect(again.body).toEqual({ object: "webhook", url: target.url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null })
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)
    expect(verifies(secret, target.requests[0])).toBe(true)
  })

  test("the test send's event carries a prediction as the API renders one", async () => {
    const target = receiver()
    const { key } = await withWebhook(target.url)
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)
    const event = JSON.parse(target.requests[0].body)
    expect(event.type).toBe("prediction.succeeded")
    expect(Schema.decodeUnknownExit(Prediction)(event.data)._tag).toBe("Success")
  })

  test("without a webhook: DELETE answers the empty resource, rotate and test give 422", async () => {
    const { key } = await server.account()
    const deleted = await server.request("/v1/webhooks", { method: "DELETE", key })
    expect(deleted.status).toBe(200)
    expect(deleted.body).toEqual({ object: "webhook", url: null, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
    const rotated = await server.request("/v1/webhooks/rotate", { method: "POST", key })
    expectEnvelope(rotated, 422, "validation_error")
    const sent = await server.request("/v1/webhooks/test", { method: "POST", key })
    expectEnvelope(sent, 422, "validation_error")
    expect((sent.body as ErrorBody).error.message).toContain("No webhook is configured")
  })

  test("rotate issues a new secret once; for the window deliveries carry both signatures, then only the new one", async () => {
    const target = receiver()
    const { accountId, key, secret: oldSecret } = await withWebhook(target.url)
    const rotated = await server.request<WebhookSecretBody>("/v1/webhooks/rotate", { method: "POST", key, body: { ignored: true } })
    expect(rotated.status).toBe(200)
    expect(rotated.body).toEqual({ object: "webhook", url: target.url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null, secret: expect.any(String) })
    const newSecret: string = rotated.body.secret
    expect(newSecret).toMatch(/^whsec_/)
    expect(newSecret).not.toBe(oldSecret)
    expect((await server.request("/v1/webhooks", { key })).body).toEqual({ object: "webhook", url: target.url, configured: true, events: ["*"], disabled_reason: null, disabled_at: null })

    const { rows } = await server.db.query(
      "SELECT EXTRACT(EPOCH FROM previous_secret_expires_at - now()) AS seconds_left FROM webhooks WHERE account_id = $1",
      [accountId]
    )
    expect(Number(rows[0].seconds_left)).toBeGreaterThan(24 * 3600 - 60)
    expect(Number(rows[0].seconds_left)).toBeLessThanOrEqual(24 * 3600)

    // Within the window: a test send and a real delivery both carry two signatures.
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)
    const deliveryId = await events.enqueue(accountId)
    expect(deliveryId).not.toBeNull()
    expect((await delivered(server, deliveryId!)).status).toBe("delivered")
    expect(target.requests).toHaveLength(2)
    for (const request of target.requests) {
      expect(request.headers["webhook-signature"].split(" ")).toHaveLength(2)
      expect(request.headers["webhook-signature"]).toMatch(/^v1,\S+ v1,\S+$/)
      expect(verifies(newSecret, request)).toBe(true)
      expect(verifies(oldSecret, request)).toBe(true)
    }

    // The window passes: only the new secret signs.
    await server.db.query(
      "UPDATE webhooks SET previous_secret_expires_at = now() - interval '1 second' WHERE account_id = $1",
      [accountId]
    )
    target.clear()
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)
    const after = target.requests[0]
    expect(after.headers["webhook-signature"].split(" ")).toHaveLength(1)
    expect(verifies(newSecret, after)).toBe(true)
    expect(verifies(oldSecret, after)).toBe(false)
  })

  test("a second rotation keeps only the latest previous secret: deliveries are signed by the new and the one before, not the first", async () => {
    const target = receiver()
    const { key, secret: first } = await withWebhook(target.url)
    const second = (await server.request<WebhookSecretBody>("/v1/webhooks/rotate", { method: "POST", key })).body.secret
    const third = (await server.request<WebhookSecretBody>("/v1/webhooks/rotate", { method: "POST", key })).body.secret
    expect(new Set([first, second, third]).size).toBe(3)
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)
    const request = target.requests[0]
    expect(request.headers["webhook-signature"].split(" ")).toHaveLength(2)
    expect([third, second, first].map((secret) => verifies(secret, request))).toEqual([true, true, false])
  })

  test("PUT validates the url: 422 validation_error naming it", async () => {
    const { key } = await server.account()
    const cases: ReadonlyArray<readonly [unknown, string]> = [
      [{}, "url"],
      [{ url: 42 }, "url"],
      [{ url: "http://127.0.0.1:9/x", extra: 1 }, "extra"],
      [{ url: "not a url" }, "url"],
      [{ url: "/relative/path" }, "url"],
      [{ url: "ftp://example.com/hook" }, "url"],
      [{ url: "https://user:pw@example.com/hook" }, "user info"],
      [{ url: "https://user@example.com/hook" }, "user info"],
      [{ url: "https://example.com/hook#part" }, "fragment"],
      [{ url: `https://example.com/${"a".repeat(2_030)}` }, "2048"],
      [{ url: "https://no-such-host.invalid/hook" }, "does not resolve"]
    ]
    for (const [body, mention] of cases) {
      const response = await server.request("/v1/webhooks", { method: "PUT", key, body })
      expectEnvelope(response, 422, "validation_error")
      expect((response.body as ErrorBody).error.message).toContain(mention)
    }
    expect((await server.request<WebhookBody>("/v1/webhooks", { key })).body.configured).toBe(false)
  })

  test("every webhook route needs the webhooks:write scope", async () => {
    const { key } = await server.account({ scopes: ["hooks:read", "predict:write"] })
    const routes: ReadonlyArray<readonly [string, string]> = [
      ["GET", "/v1/webhooks"],
      ["PUT", "/v1/webhooks"],
      ["DELETE", "/v1/webhooks"],
      ["POST", "/v1/webhooks/rotate"],
      ["POST", "/v1/webhooks/test"]
    ]
    for (const [method, path] of routes) {
      const response = await server.request(path, { method, key, body: method === "PUT" ? { url: "http://127.0.0.1:9/" } : undefined })
      expectEnvelope(response, 403, "api_not_enabled")
    }
  })

  test("after plan loss GET still answers (configured false) while PUT gives 403", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook(target.url)
    const patched = await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { plan: "free" } })
    expect(patched.status).toBe(200)
    const got = await server.request("/v1/webhooks", { key })
    expect(got.status).toBe(200)
    expect(got.body).toEqual({ object: "webhook", url: target.url, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
    // The key lookup cache holds the old plan for at most AUTH_CACHE_TTL; wait for it on a route that changes nothing.
    await eventually("the plan loss seen by the key cache", async () =>
      (await server.request("/v1/hooks/categories", { key })).status === 403
    )
    expectEnvelope(await server.request("/v1/webhooks", { method: "PUT", key, body: { url: target.url } }), 403, "api_not_enabled")
    expect(await events.enqueue(accountId)).toBeNull()
  })
})

describe("test send", () => {
  test("to a receiver answering 200: delivered, signed like a real event", async () => {
    const target = receiver()
    const { key, secret } = await withWebhook(target.url)
    const response = await server.request("/v1/webhooks/test", { method: "POST", key, body: { ignored: "yes" } })
    expect(response.status).toBe(200)
    expect(response.body).toEqual({ object: "webhook_test", delivered: true, status_code: 200, event: "prediction.succeeded" })

    expect(target.requests).toHaveLength(1)
    const request = target.requests[0]
    expect(request.method).toBe("POST")
    expect(request.path).toBe("/hooks")
    expect(request.headers["content-type"]).toBe("application/json")
    const event = verify(secret, request) as WebhookEvent
    expect(event).toMatchObject({ object: "event", type: "prediction.succeeded" })
    expect(event.id).toMatch(/^evt_[0-9a-f]{32}$/)
    expect(request.headers["webhook-id"]).toBe(event.id)
    // Marked as a test, so a receiver can tell it from a real prediction's event.
    expect(request.headers["hookline-test"]).toBe("true")
    expect(Math.abs(Number(request.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(60)
    expect(event.data).toMatchObject({ object: "prediction", status: "succeeded", error: null })
    expect(event.data.id).toMatch(/^pred_[0-9a-f]{32}$/)
    expect(event.data.result!.band).toMatch(/^(low|medium|high)$/)
    expect(new Date(event.created_at).toISOString()).toBe(event.created_at)
    expect(verifies(secret, request, request.body.replace("succeeded", "failed"))).toBe(false)
    // Nothing goes to the outbox.
    const { rows } = await server.db.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE event_id = $1", [event.id])
    expect(rows[0].n).toBe(0)
  })

  test("each test send uses fresh ids: a new event id and a prediction id no job has", async () => {
    const target = receiver()
    const { key, secret } = await withWebhook(target.url)
    for (let i = 0; i < 2; i++) {
      expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })).body.delivered).toBe(true)
    }
    const events = target.requests.map((request) => verify(secret, request) as WebhookEvent)
    expect(events).toHaveLength(2)
    expect(events[0].id).not.toBe(events[1].id)
    expect(target.requests.map((request) => request.headers["webhook-id"])).toEqual(events.map((event) => event.id))
    expect(events[0].data.id).not.toBe(events[1].data.id)
    const { rows } = await server.db.query("SELECT count(*)::int AS n FROM predictions WHERE id = ANY($1)", [events.map((event) => event.data.id)])
    expect(rows[0].n).toBe(0)
  })

  test("to a receiver answering 500: not delivered, status 500", async () => {
    const target = receiver()
    target.answer(500)
    const { key } = await withWebhook(target.url)
    const response = await server.request("/v1/webhooks/test", { method: "POST", key })
    expect(response.status).toBe(200)
    expect(response.body).toEqual({ object: "webhook_test", delivered: false, status_code: 500, event: "prediction.succeeded" })
    expect(target.requests).toHaveLength(1)
  })

  test("to a closed port: not delivered, status_code null", async () => {
    const { key } = await withWebhook(await closedPortUrl())
    const response = await server.request("/v1/webhooks/test", { method: "POST", key })
    expect(response.status).toBe(200)
    expect(response.body).toEqual({ object: "webhook_test", delivered: false, status_code: null, event: "prediction.succeeded" })
  })

  test("to a receiver that never answers: not delivered after the timeout, status_code null", async () => {
    const target = receiver()
    target.hang(true)
    const { key } = await withWebhook(target.url)
    const response = await server.request("/v1/webhooks/test", { method: "POST", key })
    expect(response.body).toEqual({ object: "webhook_test", delivered: false, status_code: null, event: "prediction.succeeded" })
    expect(target.requests).toHaveLength(1)
  })

  test("a redirect is not followed and counts as not delivered", async () => {
    const target = receiver()
    target.answer(302)
    const { key } = await withWebhook(target.url)
    const response = await server.request("/v1/webhooks/test", { method: "POST", key })
    expect(response.body).toEqual({ object: "webhook_test", delivered: false, status_code: 302, event: "prediction.succeeded" })
    expect(target.requests.map((r) => r.path)).toEqual(["/hooks"])
  })
})

describe("delivery from the outbox", () => {
  test("an event is delivered once, verified by the Standard Webhooks verifier; a tampered body fails", async () => {
    const target = receiver()
    // The receiver takes its time answering: the attempt's recorded duration includes that wait.
    const answerDelayMs = 150
    target.delay(answerDelayMs)
    const { accountId, secret } = await withWebhook(target.url)
    const data = samplePrediction("succeeded")
    const deliveryId = await events.enqueue(accountId, "prediction.succeeded", data)
    expect(deliveryId).toMatch(/^dlv_[0-9a-f]{32}$/)
    const row = await delivered(server, deliveryId!)
    expect(row).toMatchObject({ status: "delivered", attempts: 1, last_status_code: 200, last_error: null, claim_token: null })
    expect(row.completed_at).not.toBeNull()

    expect(target.requests).toHaveLength(1)
    const request = target.requests[0]
    expect(request.headers["hookline-test"]).toBeUndefined()
    const event = verify(secret, request)
    expect(event).toEqual({ id: row.event_id, object: "event", type: "prediction.succeeded", created_at: expect.any(String), data })
    expect(request.body.startsWith(`{"id":"${row.event_id}","object":"event","type":"prediction.succeeded","created_at":`)).toBe(true)
    expect(request.headers["webhook-id"]).toBe(row.event_id)
    expect(verifies(secret, request, request.body.replace('"medium"', '"high"'))).toBe(false)
    expect(verifies(`whsec_${randomBytes(32).toString("base64")}`, request)).toBe(false)

    const attempts = await attemptsOf(server, deliveryId!)
    expect(attempts).toHaveLength(1)
    expect(attempts[0]).toMatchObject({ attempt: 1, status_code: 200, error: null })
    // At least the receiver's own wait (a timer may fire up to a millisecond early).
    expect(attempts[0].duration_ms).toBeGreaterThanOrEqual(answerDelayMs - 1)
    expect(attempts[0].dispatcher).toMatch(/^dsp_/)
  })

  test("a real prediction that succeeds is delivered as prediction.succeeded, verified by standardwebhooks", async () => {
    const target = receiver()
    const { key, secret } = await withWebhook(target.url)
    const clip = join(tempDir("hookline-webhook-clip-"), "clip.mp4")
    const ffmpeg = Bun.spawn(
      [ffmpegPath, "-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25:duration=2",
        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", clip],
      { stdin: "ignore", stdout: "ignore", stderr: "inherit" }
    )
    expect(await ffmpeg.exited).toBe(0)

    const link = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })
    expect(link.status).toBe(200)
    // Links name PUBLIC_BASE_URL; the test reaches the server on its real address.
    const uploaded = await fetch(server.url + new URL(link.body.upload_url).pathname, { method: "PUT", body: readFileSync(clip) })
    expect(uploaded.status).toBe(200)

    await eventually("the prediction's webhook", () => target.requests.length === 1, 30_000)
    const event = verify(secret, target.requests[0]) as WebhookEvent
    const prediction = await server.request<PredictionBody>(`/v1/predict/${link.body.prediction_id}`, { key })
    expect(prediction.body.status).toBe("succeeded")
    expect(event).toEqual({
      id: target.requests[0].headers["webhook-id"],
      object: "event",
      type: "prediction.succeeded",
      created_at: expect.any(String),
      data: prediction.body
    })
  })

  test("a prediction.failed event carries the failed prediction", async () => {
    const target = receiver()
    const { accountId, secret } = await withWebhook(target.url)
    const data = samplePrediction("failed")
    const deliveryId = await events.enqueue(accountId, "prediction.failed", data)
    await delivered(server, deliveryId!)
    expect(verify(secret, target.requests[0])).toMatchObject({ type: "prediction.failed", data })
  })

  test("the outbox row commits or rolls back with the caller's transaction", async () => {
    const { accountId } = await withWebhook("http://127.0.0.1:9/never")
    await events.enqueueAndRollBack(accountId)
    const { rows } = await server.db.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE account_id = $1", [accountId])
    expect(rows[0].n).toBe(0)
  })

  test("a receiver failing 3 times then succeeding gets one success after 4 recorded attempts", async () => {
    const target = receiver()
    target.failNext(3, 500)
    const { accountId, secret } = await withWebhook(target.url)
    const deliveryId = await events.enqueue(accountId)
    const row = await delivered(server, deliveryId!)
    expect(row).toMatchObject({ status: "delivered", attempts: 4, last_status_code: 200 })

    expect(target.requests.map((r) => r.answered)).toEqual([500, 500, 500, 200])
    expect(new Set(target.requests.map((r) => r.headers["webhook-id"]))).toEqual(new Set([row.event_id]))
    for (const request of target.requests) expect(verifies(secret, request)).toBe(true)
    const attempts = await attemptsOf(server, deliveryId!)
    expect(attempts.map((a) => [a.attempt, a.status_code, a.error])).toEqual([
      [1, 500, "answered 500"],
      [2, 500, "answered 500"],
      [3, 500, "answered 500"],
      [4, 200, null]
    ])
  })

  test("a delivery that never succeeds is marked failed after the last retry", async () => {
    const target = receiver()
    target.answer(503)
    const { accountId } = await withWebhook(target.url)
    const deliveryId = await events.enqueue(accountId)
    const row = await delivered(server, deliveryId!)
    expect(row).toMatchObject({ status: "failed", attempts: 4, last_status_code: 503, last_error: "answered 503" })
    expect(row.completed_at).not.toBeNull()
    expect(target.requests).toHaveLength(4)
    expect(await attemptsOf(server, deliveryId!)).toHaveLength(4)
  })

  test("connection failures are recorded with no status code and retried", async () => {
    const { accountId } = await withWebhook(await closedPortUrl())
    const deliveryId = await events.enqueue(accountId)
    const row = await delivered(server, deliveryId!)
    expect(row).toMatchObject({ status: "failed", attempts: 4, last_status_code: null })
    const attempts = await attemptsOf(server, deliveryId!)
    expect(attempts).toHaveLength(4)
    for (const attempt of attempts) {
      expect(attempt.status_code).toBeNull()
      expect(attempt.error).toContain("connection failed")
    }
  })

  test("a webhook disabled while a delivery is pending: the delivery is dropped, not sent", async () => {
    const target = receiver()
    target.hang(true)
    const { accountId, key } = await withWebhook(target.url)
    const deliveryId = await events.enqueue(accountId)
    await eventually("the first attempt reached the receiver", () => target.requests.length === 1)
    expect((await server.request("/v1/webhooks", { method: "DELETE", key })).status).toBe(200)
    target.hang(false)
    const row = await delivered(server, deliveryId!)
    expect(row).toMatchObject({ status: "failed", attempts: 1, last_error: "webhook disabled" })
    expect(target.requests).toHaveLength(1)
    expect(await attemptsOf(server, deliveryId!)).toHaveLength(1)
  })
})

describe("several server processes on one database", () => {
  let first: TestServer
  let second: TestServer | undefined
  let third: TestServer | undefined
  let firstEvents: ReturnType<typeof outbox>

  beforeAll(async () => {
    first = await startTestServer({ ...env, WEBHOOK_RETRY_SCHEDULE: "200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms" })
    firstEvents = outbox(first)
  })
  afterAll(async () => {
    await firstEvents.dispose()
    await third?.close()
    await second?.close()
    await first.close()
  })

  test("a restart in the middle of retries still delivers; the attempt cut short is handed back", async () => {
    const target = receiver()
    // First attempt fails, the retry is still waiting for an answer when the server stops.
    target.script([500, "hang"])
    const { accountId, secret } = await withWebhook(target.url, first)
    const deliveryId = await firstEvents.enqueue(accountId)
    await eventually("the retry in flight", () => target.requests.length === 2)
    await first.stop()
    const stoppedAt = Date.now()
    const released = await first.db.query(
      "SELECT status, attempts, claim_token, next_attempt_at <= now() AS due FROM webhook_deliveries WHERE id = $1",
      [deliveryId]
    )
    expect(released.rows[0]).toEqual({ status: "pending", attempts: 1, claim_token: null, due: true })

    second = await startTestServer(env, { databaseUrl: first.databaseUrl })
    const row = await delivered(second, deliveryId!)
    expect(row).toMatchObject({ status: "delivered", attempts: 2, last_status_code: 200 })
    expect(target.requests.map((r) => r.answered)).toEqual([500, null, 200])
    expect(target.requests[2].receivedAt).toBeGreaterThanOrEqual(stoppedAt)
    expect(new Set(target.requests.map((r) => r.headers["webhook-id"]))).toEqual(new Set([row.event_id]))
    expect(verifies(secret, target.requests[2])).toBe(true)
    const attempts = await attemptsOf(second, deliveryId!)
    expect(attempts.map((a) => [a.attempt, a.status_code])).toEqual([[1, 500], [2, 200]])
    expect(attempts[0].dispatcher).not.toBe(attempts[1].dispatcher)
  })

  test("a process that died mid-attempt leaves its claim to others once the lease runs out", async () => {
    const target = receiver()
    const { accountId } = await withWebhook(target.url, second!)
    const deliveryId = await firstEvents.enqueue(accountId)
    await delivered(second!, deliveryId!)
    // As a crashed dispatcher leaves it: claimed, attempt counted, lease still running.
    await second!.db.query(
      `UPDATE webhook_deliveries
          SET status = 'pending', attempts = 1, claim_token = 'crashed', completed_at = NULL,
              next_attempt_at = now() + interval '1 second'
        WHERE id = $1`,
      [deliveryId]
    )
    target.clear()
    const row = await eventually("redelivered after the lease", async () => {
      const current = await deliveryOf(second!, deliveryId!)
      return current.status === "delivered" && current.attempts === 2 ? current : undefined
    })
    expect(row.claim_token).toBeNull()
    expect(target.requests).toHaveLength(1)
  })

  test("two dispatchers at once deliver each attempt once", async () => {
    third = await startTestServer({ ...env, WEBHOOK_DISPATCH_CONCURRENCY: "4" }, { databaseUrl: first.databaseUrl })
    const target = receiver()
    target.delay(20)
    const { accountId } = await withWebhook(target.url, third)
    const count = 40
    const ids = await Promise.all(Array.from({ length: count }, () => firstEvents.enqueue(accountId)))
    await eventually("all deliveries finished", async () => {
      const { rows } = await third!.db.query(
        "SELECT count(*)::int AS n FROM webhook_deliveries WHERE account_id = $1 AND status = 'delivered'",
        [accountId]
      )
      return rows[0].n === count
    })
    expect(target.requests).toHaveLength(count)
    expect(new Set(target.requests.map((r) => r.headers["webhook-id"])).size).toBe(count)
    const { rows } = await third.db.query(
      `SELECT a.delivery_id, a.dispatcher, d.attempts FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
        WHERE d.account_id = $1`,
      [accountId]
    )
    expect(rows).toHaveLength(count)
    expect(new Set(rows.map((r) => r.delivery_id))).toEqual(new Set(ids))
    expect(rows.every((r) => r.attempts === 1)).toBe(true)
    // Both processes took part.
    expect(new Set(rows.map((r) => r.dispatcher)).size).toBe(2)
  })
})

describe("development settings", () => {
  test("a warning is logged at start for each of WEBHOOK_ALLOW_INSECURE and WEBHOOK_ALLOW_PRIVATE that is on, none when off", async () => {
    const warningsWith = async (settings: Record<string, string>) => {
      const lines: Array<{ readonly level: string; readonly message: string }> = []
      const started = await startTestServer(
        { ...env, ...settings },
        { databaseUrl: server.databaseUrl, background: false, logger: Logger.map(Logger.formatJson, (line) => lines.push(JSON.parse(line))) }
      )
      await started.stop()
      await started.db.end()
      return lines.filter((line) => line.message.startsWith("WEBHOOK_ALLOW_")).map((line) => `${line.level} ${line.message.split(":")[0]}`)
    }
    expect(await warningsWith({ WEBHOOK_ALLOW_INSECURE: "true", WEBHOOK_ALLOW_PRIVATE: "true" })).toEqual([
      "WARN WEBHOOK_ALLOW_INSECURE is on",
      "WARN WEBHOOK_ALLOW_PRIVATE is on"
    ])
    expect(await warningsWith({ WEBHOOK_ALLOW_INSECURE: "false", WEBHOOK_ALLOW_PRIVATE: "true" })).toEqual(["WARN WEBHOOK_ALLOW_PRIVATE is on"])
    expect(await warningsWith({ WEBHOOK_ALLOW_INSECURE: "false", WEBHOOK_ALLOW_PRIVATE: "false" })).toEqual([])
  })
})

describe("SSRF protection (private targets not allowed)", () => {
  let strict: TestServer
  let strictEvents: ReturnType<typeof outbox>

  beforeAll(async () => {
    strict = await startTestServer({ ...env, WEBHOOK_ALLOW_PRIVATE: "false" })
    strictEvents = outbox(strict)
  })
  afterAll(async () => {
    await strictEvents.dispose()
    await strict.close()
  })

  const refused: ReadonlyArray<readonly [string, string]> = [
    ["http://127.0.0.1/hook", "loopback"],
    ["http://[::1]/hook", "loopback"],
    ["http://169.254.169.254/latest/meta-data", "link-local"],
    ["http://10.0.0.1/hook", "private"],
    ["http://[::ffff:10.0.0.1]/hook", "private"],
    ["https://192.168.1.20/hook", "private"],
    ["https://[fd00::1]/hook", "private"],
    ["https://0.0.0.0/hook", "unspecified"],
    ["https://224.0.0.1/hook", "multicast"],
    ["http://2130706433/hook", "loopback"]
  ]

  test.each(refused)("PUT %s → 422 (%s)", async (url, range) => {
    const { key } = await strict.account()
    const response = await strict.request("/v1/webhooks", { method: "PUT", key, body: { url } })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toMatch(/^url: /)
    expect((response.body as ErrorBody).error.message).toContain(`a ${range} address`)
    expect((await strict.request("/v1/webhooks", { key })).body).toEqual({ object: "webhook", url: null, configured: false, events: ["*"], disabled_reason: null, disabled_at: null })
  })

  test("a host name that resolves to loopback (localhost) → 422", async () => {
    const { key } = await strict.account()
    const response = await strict.request("/v1/webhooks", { method: "PUT", key, body: { url: "http://localhost:8080/hook" } })
    expectEnvelope(response, 422, "validation_error")
    expect((response.body as ErrorBody).error.message).toContain("the host localhost resolves to")
    expect((response.body as ErrorBody).error.message).toContain("loopback address")
  })

  test("a public address is accepted", async () => {
    const { key } = await strict.account()
    const response = await strict.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key, body: { url: "https://93.184.215.14/hook" } })
    expect(response.status).toBe(200)
    expect(response.body.configured).toBe(true)
  })

  test("the address is checked again at each delivery and at the test send", async () => {
    const target = receiver()
    const { accountId, key } = await withWebhook("https://93.184.215.14/hook", strict)
    // As if the name now resolved to loopback.
    await strict.db.query("UPDATE webhooks SET url = $2 WHERE account_id = $1", [accountId, target.url])

    const sent = await strict.request("/v1/webhooks/test", { method: "POST", key })
    expectEnvelope(sent, 422, "validation_error")
    expect((sent.body as ErrorBody).error.message).toContain("loopback address")

    const deliveryId = await strictEvents.enqueue(accountId)
    const row = await delivered(strict, deliveryId!)
    expect(row).toMatchObject({ status: "failed", attempts: 4, last_status_code: null })
    const attempts = await attemptsOf(strict, deliveryId!)
    expect(attempts).toHaveLength(4)
    for (const attempt of attempts) expect(attempt.error).toBe(
      "url refused: 127.0.0.1 is a loopback address; webhooks must reach a public address " +
        "(a server run for local development allows others with WEBHOOK_ALLOW_PRIVATE=true)"
    )
    expect(target.requests).toHaveLength(0)
  })
})

describe("embedded mode", () => {
  test("with PGlite (one session shared by the pool's connections, no LISTEN) the dispatcher delivers by polling", async () => {
    const target = receiver()
    const dataDir = tempDir("hookline-webhooks-embedded-")
    // No fallback to the process environment: a DATABASE_URL there would leave embedded mode.
    const provider = ConfigProvider.fromEnvRecord({ ...env, DATA_DIR: dataDir })
    const runtime = ManagedRuntime.make(
      DispatcherLive.pipe(
        Layer.provideMerge(ServicesLive),
        Layer.provideMerge(SqlLive),
        Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
        Layer.provide(ConfigProvider.layer(provider))
      )
    )
    try {
      const { secret, deliveryId } = await runtime.runPromise(
        Effect.gen(function*() {
          expect((yield* DatabaseMode).embedded).toBe(true)
          const account = yield* (yield* Accounts).create({ plan: "pro" })
          const webhooks = yield* Webhooks
          const created = yield* webhooks.set(account.id, target.url)
          const deliveryId = yield* webhooks.enqueueEvent(account.id, "prediction.succeeded", samplePrediction())
          return { secret: created.secret ?? "", deliveryId }
        })
      )
      expect(deliveryId).not.toBeNull()
      await eventually("the embedded delivery", () => target.requests.length === 1)
      expect(verifies(secret, target.requests[0])).toBe(true)
    } finally {
      await runtime.dispose()
      rmSync(dataDir, { recursive: true, force: true })
    }
  })
})

describe("https targets", () => {
  const tlsDir = new URL("./support/tls/", import.meta.url).pathname
  const attemptScript = new URL("./support/attempt.ts", import.meta.url).pathname

  /** One attempt in a child process that trusts the test certificate (or not). */
  const attemptIn = async (url: string, trustTestCertificate: boolean) => {
    const childEnv: Record<string, string | undefined> = { ...process.env, NODE_EXTRA_CA_CERTS: undefined }
    if (trustTestCertificate) childEnv.NODE_EXTRA_CA_CERTS = `${tlsDir}localhost.crt`
    const child = Bun.spawn([process.execPath, attemptScript, url], { env: childEnv, stdout: "pipe", stderr: "inherit" })
    const output = await new Response(child.stdout).text()
    expect(await child.exited).toBe(0)
    return JSON.parse(output)
  }

  test("the connection goes to the checked address while TLS still verifies the host name", async () => {
    const hosts: Array<string> = []
    const receiverTls = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      tls: { cert: await Bun.file(`${tlsDir}localhost.crt`).text(), key: await Bun.file(`${tlsDir}localhost.key`).text() },
      fetch: (request) => {
        hosts.push(request.headers.get("host") ?? "")
        return new Response("ok")
      }
    })
    try {
      const port = receiverTls.port
      expect(await attemptIn(`https://localhost:${port}/hooks`, true)).toMatchObject({ delivered: true, statusCode: 200, error: null })
      expect(hosts).toEqual([`localhost:${port}`])
      // The certificate names localhost only: an address-literal URL fails verification.
      expect(await attemptIn(`https://127.0.0.1:${port}/hooks`, true)).toEqual(
        expect.objectContaining({ delivered: false, statusCode: null, error: "connection failed (ERR_TLS_CERT_ALTNAME_INVALID)" })
      )
      // An untrusted certificate fails too.
      expect(await attemptIn(`https://localhost:${port}/hooks`, false)).toMatchObject({ delivered: false, statusCode: null })
      expect(hosts).toHaveLength(1)
    } finally {
      await receiverTls.stop(true)
    }
  })
})

describe("building blocks", () => {
  test.each([
    ["0.0.0.0", "unspecified"],
    ["10.255.0.1", "private"],
    ["100.64.0.1", "private"],
    ["127.8.0.1", "loopback"],
    ["169.254.169.254", "link-local"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.168.0.1", "private"],
    ["192.0.2.1", "reserved"],
    ["198.18.0.1", "reserved"],
    ["224.0.0.251", "multicast"],
    ["240.0.0.1", "reserved"],
    ["255.255.255.255", "reserved"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["fe80::1", "link-local"],
    ["fe80::1%eth0", "link-local"],
    ["fc00::1", "private"],
    ["fd12:3456::1", "private"],
    ["ff02::1", "multicast"],
    ["::ffff:10.0.0.1", "private"],
    ["::ffff:a00:1", "private"],
    ["::ffff:127.0.0.1", "loopback"],
    ["[::ffff:169.254.169.254]", "link-local"],
    ["64:ff9b::a9fe:a9fe", "link-local"],
    ["2002:7f00:1::", "loopback"],
    ["2001:db8::1", "reserved"],
    ["2001::1", "reserved"],
    ["::10.0.0.1", "reserved"],
    ["4000::1", "reserved"],
    // Not an address at all: refused too.
    ["256.1.1.1", "reserved"],
    ["1.2.3", "reserved"],
    ["1:2:3:4:5:6:7:8:9", "reserved"],
    ["example.com", "reserved"]
  ])("%s is refused as %s", (address, range) => {
    expect(refusedRange(address)).toBe(range)
  })

  test.each(["8.8.8.8", "172.32.0.1", "93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])(
    "%s is public",
    (address) => {
      expect(refusedRange(address)).toBeNull()
    }
  )

  test("URL shape rules", () => {
    const shape = (url: string, allowInsecure = false) =>
      Result.match(checkUrlShape(url, { allowInsecure }), { onFailure: (e) => e.message, onSuccess: () => "ok" })
    expect(shape("https://example.com/hook")).toBe("ok")
    expect(shape("https://example.com:8443/hook?x=1")).toBe("ok")
    expect(shape("http://example.com/hook")).toBe("must use https (a server run for local development allows http:// with WEBHOOK_ALLOW_INSECURE=true)")
    expect(shape("http://example.com/hook", true)).toBe("ok")
    expect(shape("https://@example.com/")).toBe("must not contain user info")
    expect(shape("https://example.com/#")).toBe("must not contain a fragment")
    expect(shape(" https://example.com/")).toContain("whitespace")
    expect(shape("javascript:alert(1)")).toBe("must be an absolute https URL")
    expect(shape(`https://example.com/${"a".repeat(2_048 - 20)}`)).toBe("ok")
    expect(shape(`https://example.com/${"a".repeat(2_048 - 19)}`)).toBe("must be at most 2048 characters")
  })

  test("secrets at rest open only for their account and server key", () => {
    const box = makeSecretBox("server-key-one")
    const sealed = box.seal("whsec_c2VjcmV0", "acct_1")
    expect(sealed).not.toContain("c2VjcmV0")
    expect(box.open(sealed, "acct_1")).toEqual(Result.succeed("whsec_c2VjcmV0"))
    expect(Result.isFailure(box.open(sealed, "acct_2"))).toBe(true)
    expect(Result.isFailure(makeSecretBox("server-key-two").open(sealed, "acct_1"))).toBe(true)
    expect(box.seal("whsec_c2VjcmV0", "acct_1")).not.toBe(sealed)
  })

  test("sealing keeps each purpose apart, round-trips an empty value and refuses cut or foreign text", () => {
    const answers = makeSealer("server-key-one", "idempotent-answer-v1")
    const sealed = answers.seal("", "scope\nkey")
    expect(answers.open(sealed, "scope\nkey")).toEqual(Result.succeed(""))
    // The same server key under another purpose (webhook secrets) is another key.
    expect(makeSealer("server-key-one", "webhook-secret-v1").open(sealed, "scope\nkey")).toEqual(Result.fail("wrong_key"))
    expect(answers.open(sealed.slice(0, 20), "scope\nkey")).toEqual(Result.fail("truncated"))
    expect(answers.open(`v2.${sealed.slice(3)}`, "scope\nkey")).toEqual(Result.fail("unknown_format"))
    const cut = makeSecretBox("server-key-one").open(sealed.slice(0, 20), "acct_1")
    expect(Result.isFailure(cut) && cut.failure.message).toBe("the stored secret is truncated")
  })

  test("our signature is the one the Standard Webhooks library computes", () => {
    const secret = `whsec_${randomBytes(32).toString("base64")}`
    const timestamp = Math.floor(Date.now() / 1000)
    const body = JSON.stringify({ hello: "world" })
    expect(sign(secret, "evt_1", timestamp, body)).toBe(new StandardWebhook(secret).sign("evt_1", new Date(timestamp * 1000), body))
  })

  test("the retry schedule parses the decisions' form", () => {
    const schedule = parseRetrySchedule("5s,5m,30m,2h,5h,10h,10h")
    expect(Result.map(schedule, (delays) => delays.map(Duration.toMillis))).toEqual(
      Result.succeed([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000])
    )
    expect(Result.map(parseRetrySchedule("100ms, 1 second"), (delays) => delays.map(Duration.toMillis))).toEqual(
      Result.succeed([100, 1_000])
    )
    expect(Result.isFailure(parseRetrySchedule("5s,soon"))).toBe(true)
  })
})
