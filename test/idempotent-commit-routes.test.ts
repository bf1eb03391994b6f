/**
 * Retries across a lost database connection on the customer routes that honour Idempotency-Key:
 * an upload link, a retry start, a webhook secret rotation and a webhook test send store their
 * answer in the transaction of what they change, so a connection cut at COMMIT never makes a
 * retry run them twice. The server talks to PostgreSQL through a proxy that holds the COMMIT
 * (PostgreSQL keeps the session and its transaction open, the server has lost it) or cuts the
 * connection before it reaches PostgreSQL.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { randomBytes } from "node:crypto"
import { sign } from "../src/Webhooks/Signing.js"
import { expectEnvelope } from "./support/envelope.js"
import type { pgProxy } from "./support/pgProxy.js"
import { startProxiedServer } from "./support/proxiedServer.js"
import { type ErrorBody, ledgerState, type PredictionBody, type Response as Answer, type TestServer } from "./support/server.js"
import type { UploadLink, WebhookSecretBody, WebhookTestBody } from "./support/server.js"

let proxy: ReturnType<typeof pgProxy>
let server: TestServer
let closeServer: () => Promise<void>
/** A webhook receiver on loopback: what it was sent, by path. */
let receiver: ReturnType<typeof Bun.serve>
const received: Array<{ readonly path: string; readonly headers: Headers; readonly body: string }> = []

beforeAll(async () => {
  ;({ close: closeServer, proxy, server } = await startProxiedServer({ WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true" }))
  receiver = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (request) => {
      received.push({ path: new URL(request.url).pathname, headers: request.headers, body: await request.text() })
      return new Response(null, { status: 204 })
    }
  })
}, 60_000)
afterAll(async () => {
  await receiver.stop(true)
  await closeServer()
})

const post = <T>(path: string, apiKey: string, idempotencyKey: string, body?: unknown) =>
  server.request<T>(path, { method: "POST", key: apiKey, headers: { "idempotency-key": idempotencyKey }, ...(body === undefined ? {} : { body }) })

const messageOf = (response: Answer) => (response.body as ErrorBody).error.message

/** A key of its own per test (the proxy finds the answer's statement by it). */
const newKey = (label: string) => `${label}-${randomBytes(6).toString("hex")}`

/** The first request's answer while its transaction is held open: outcome unknown, no charge; retries 409, none run. */
const expectHeld = async (first: Answer, retry: () => Promise<Answer>) => {
  expectEnvelope(first, 503, "service_unavailable")
  expect(messageOf(first)).toContain("its outcome is unknown")
  expect(first.headers.get("x-credits-charged")).toBeNull()
  for (const refused of await Promise.all([retry(), retry()])) {
    expectEnvelope(refused, 409, "idempotency_in_progress")
    expect(refused.headers.get("x-credits-charged")).toBeNull()
  }
}

/** The first request's answer when its COMMIT never reached PostgreSQL: not completed, no charge. */
const expectNotCompleted = (first: Answer) => {
  expectEnvelope(first, 503, "service_unavailable")
  expect(messageOf(first)).toContain("not completed")
  expect(first.headers.get("x-credits-charged")).toBeNull()
}

const expectReplayOf = (retry: Answer, first: Answer) => {
  expect(retry.status).toBe(200)
  expect(retry.headers.get("idempotent-replayed")).toBe("true")
  expect(retry.headers.get("original-request-id")).toBe(first.headers.get("x-request-id"))
}

const uploadsOf = async (accountId: string) =>
  (await server.db.query("SELECT id, prediction_id FROM uploads WHERE account_id = $1 ORDER BY id", [accountId])).rows

describe("an upload link whose connection is lost at COMMIT", () => {
  test("held open, then committed: 409 while open, then the first's link; one link", async () => {
    const account = await server.account({ plan: "pro" })
    const key = newKey("upload-held")
    const create = () => post<UploadLink>("/v1/predict/upload", account.key, key)
    proxy.arm("holdCommit", "pass", key)
    const first = await create()
    await expectHeld(first, create)
    expect(await uploadsOf(account.accountId)).toEqual([])
    await proxy.endHeld("commit")
    const retry = await create()
    expectReplayOf(retry, first)
    expect(await uploadsOf(account.accountId)).toEqual([{ id: retry.body.upload_id, prediction_id: retry.body.prediction_id }])
  })

  test("cut before COMMIT: 503 not completed, no link; the retry makes one", async () => {
    const account = await server.account({ plan: "pro" })
    const key = newKey("upload-cut")
    proxy.arm("cutBeforeCommit", "pass", key)
    expectNotCompleted(await post("/v1/predict/upload", account.key, key))
    expect(await uploadsOf(account.accountId)).toEqual([])
    const retry = await post<UploadLink>("/v1/predict/upload", account.key, key)
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(await uploadsOf(account.accountId)).toEqual([{ id: retry.body.upload_id, prediction_id: retry.body.prediction_id }])
  })
})

/** An account whose clip landed while it had no credits, then was granted 25 top-up credits: its job awaits a retry start. */
const landedUnpaid = async () => {
  const account = await server.account({ plan: "pro", monthly_balance: 0, topup_balance: 0 })
  const link = (await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key: account.key })).body
  // An MP4 by its first bytes.
  const mp4 = new Uint8Array([0, 0, 0, 24, ...Buffer.from("ftypisom"), 0, 0, 2, 0, ...Buffer.from("isommp41"), ...randomBytes(64)])
  expect((await fetch(server.url + new URL(link.upload_url).pathname, { method: "PUT", body: mp4 })).status).toBe(200)
  const granted = await server.admin(`/admin/accounts/${account.accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 25 } })
  expect(granted.status).toBe(200)
  return { account, link }
}

/** The prediction holds reserved for the account, in any state. */
const predictionHolds = async (accountId: string) =>
  (await server.db.query("SELECT reference_id, status FROM holds WHERE account_id = $1 AND operation = 'prediction'", [accountId])).rows

const unpaid = { monthly: 0, topup: 25, journalMonthly: 0, journalTopup: 25, pendingHolds: 0 }
const reservedOnce = { monthly: 0, topup: 5, journalMonthly: 0, journalTopup: 5, pendingHolds: 1 }

describe("a retry start whose connection is lost at COMMIT", () => {
  test("held open, then committed: 409 while open, then the first's prediction and charge; one reserve", async () => {
    const { account, link } = await landedUnpaid()
    const key = newKey("predict-held")
    const start = () => post<PredictionBody>("/v1/predict", account.key, key, { upload_id: link.upload_id })
    proxy.arm("holdCommit", "pass", key)
    const first = await start()
    await expectHeld(first, start)
    expect(await ledgerState(server.db, account.accountId)).toEqual(unpaid)
    await proxy.endHeld("commit")
    const retry = await start()
    expectReplayOf(retry, first)
    expect(retry.body).toMatchObject({ id: link.prediction_id, status: "queued" })
    expect(retry.headers.get("x-credits-charged")).toBe("20")
    expect(retry.headers.get("x-credits-remaining")).toBe("5")
    expect(await predictionHolds(account.accountId)).toEqual([{ reference_id: link.prediction_id, status: "pending" }])
    expect(await ledgerState(server.db, account.accountId)).toEqual(reservedOnce)
  })

  test("cut before COMMIT: 503 not completed, nothing reserved; the retry reserves once", async () => {
    const { account, link } = await landedUnpaid()
    const key = newKey("predict-cut")
    proxy.arm("cutBeforeCommit", "pass", key)
    expectNotCompleted(await post("/v1/predict", account.key, key, { upload_id: link.upload_id }))
    expect(await ledgerState(server.db, account.accountId)).toEqual(unpaid)
    const retry = await post<PredictionBody>("/v1/predict", account.key, key, { upload_id: link.upload_id })
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(retry.body).toMatchObject({ id: link.prediction_id, status: "queued" })
    expect(retry.headers.get("x-credits-charged")).toBe("20")
    expect(await predictionHolds(account.accountId)).toEqual([{ reference_id: link.prediction_id, status: "pending" }])
    expect(await ledgerState(server.db, account.accountId)).toEqual(reservedOnce)
  })
})

/** An account with a webhook on the receiver at a path of its own; its first secret. */
const withWebhook = async (label: string) => {
  const account = await server.account({ plan: "pro" })
  const path = `/hooks/${newKey(label)}`
  const configured = await server.request<WebhookSecretBody>("/v1/webhooks", {
    method: "PUT",
    key: account.key,
    body: { url: `http://127.0.0.1:${receiver.port}${path}` }
  })
  expect(configured.status).toBe(200)
  return { account, path, secret: configured.body.secret }
}

const sentTo = (path: string) => received.filter((one) => one.path === path)

/** The secrets a test send to `path` is signed with, current first, told from the signatures it carries. */
const signingSecretsOf = async (apiKey: string, path: string, candidates: ReadonlyArray<string>) => {
  const before = sentTo(path).length
  expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key: apiKey })).status).toBe(200)
  const sent = sentTo(path)[before]
  const id = sent.headers.get("webhook-id") ?? ""
  const timestamp = Number(sent.headers.get("webhook-timestamp"))
  return (sent.headers.get("webhook-signature") ?? "").split(" ").map((signature) =>
    candidates.find((secret) => sign(secret, id, timestamp, sent.body) === signature) ?? "unknown")
}

describe("a webhook secret rotation whose connection is lost at COMMIT", () => {
  test("held open, then committed: 409 while open, then the first's new secret; one rotation, the first secret kept as previous", async () => {
    const { account, path, secret } = await withWebhook("rotate-held")
    const key = newKey("rotate-held")
    const rotate = () => post<WebhookSecretBody>("/v1/webhooks/rotate", account.key, key)
    proxy.arm("holdCommit", "pass", key)
    const first = await rotate()
    await expectHeld(first, rotate)
    expect(await signingSecretsOf(account.key, path, [secret])).toEqual([secret])
    await proxy.endHeld("commit")
    const retry = await rotate()
    expectReplayOf(retry, first)
    expect(retry.body.secret).not.toBe(secret)
    expect(await signingSecretsOf(account.key, path, [secret, retry.body.secret])).toEqual([retry.body.secret, secret])
  })

  test("cut before COMMIT: 503 not completed, the secret unchanged; the retry rotates once", async () => {
    const { account, path, secret } = await withWebhook("rotate-cut")
    const key = newKey("rotate-cut")
    proxy.arm("cutBeforeCommit", "pass", key)
    expectNotCompleted(await post("/v1/webhooks/rotate", account.key, key))
    expect(await signingSecretsOf(account.key, path, [secret])).toEqual([secret])
    const retry = await post<WebhookSecretBody>("/v1/webhooks/rotate", account.key, key)
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(await signingSecretsOf(account.key, path, [secret, retry.body.secret])).toEqual([retry.body.secret, secret])
  })
})

describe("a webhook test send whose answer's connection is lost at COMMIT", () => {
  test("held open, then committed: 409 while open, none sent again; then the first's answer; one send", async () => {
    const { account, path } = await withWebhook("test-held")
    const key = newKey("test-held")
    const send = () => post<WebhookTestBody>("/v1/webhooks/test", account.key, key)
    proxy.arm("holdCommit", "pass", key)
    const first = await send()
    await expectHeld(first, send)
    expect(sentTo(path)).toHaveLength(1)
    await proxy.endHeld("commit")
    const retry = await send()
    expectReplayOf(retry, first)
    expect(retry.body).toEqual({ object: "webhook_test", delivered: true, status_code: 204, event: "prediction.succeeded" })
    expect(sentTo(path)).toHaveLength(1)
    expect(sentTo(path)[0].headers.get("hookline-test")).toBe("true")
  })

  test("cut before COMMIT: 503 not completed (the send was made; its answer was not kept); the retry sends once more, then replays", async () => {
    const { account, path } = await withWebhook("test-cut")
    const key = newKey("test-cut")
    proxy.arm("cutBeforeCommit", "pass", key)
    expectNotCompleted(await post("/v1/webhooks/test", account.key, key))
    expect(sentTo(path)).toHaveLength(1)
    const retry = await post<WebhookTestBody>("/v1/webhooks/test", account.key, key)
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    const again = await post<WebhookTestBody>("/v1/webhooks/test", account.key, key)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(again.body).toEqual(retry.body)
    expect(sentTo(path)).toHaveLength(2)
  })
})
