/**
 * Webhook delivery as one service: the Webhooks outbox, the Dispatcher and the delivery log,
 * built alone on a real Postgres database, with no HTTP server. The receiver is a fake
 * WebhookTransport (it records each request and answers the statuses a test scripts) and
 * TestClock drives the retry schedule: a test moves time and asks the dispatcher to deliver
 * what is due, so nothing sleeps.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Clock, ConfigProvider, Duration, Effect, Fiber, Layer, ManagedRuntime, References } from "effect"
import { TestClock } from "effect/testing"
import { randomBytes } from "node:crypto"
import { join } from "node:path"
import { Secrets } from "../src/Config.js"
import { SqlLive } from "../src/Sql.js"
import { WebhookDeliveries } from "../src/Webhooks/Deliveries.js"
import { Dispatcher } from "../src/Webhooks/Dispatcher.js"
import { WebhooksRepo } from "../src/Webhooks/Repo.js"
import { sign } from "../src/Webhooks/Signing.js"
import { type PostResult, WebhookTransport } from "../src/Webhooks/Transport.js"
import { Webhooks } from "../src/Webhooks/Webhooks.js"
import { createDatabase, dropDatabase, testPool } from "./support/server.js"
import { samplePrediction } from "./support/webhookFixture.js"
import { tempDir } from "./support/tempDirs.js"

/** What the fake receiver was sent, and when (by the Clock). */
interface Received {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly at: number
}

/** A receiver that answers from a script (then 200), and keeps every request. */
const fakeReceiver = () => {
  const received: Array<Received> = []
  const script: Array<number | "unreachable"> = []
  const transport = WebhookTransport.of({
    post: (request) =>
      Effect.map(Clock.currentTimeMillis, (at): PostResult => {
        received.push({ url: request.target.url.toString(), headers: request.headers, body: request.body, at })
        const answer = script.shift() ?? 200
        return answer === "unreachable"
          ? { _tag: "Failed", error: "connection failed (ECONNREFUSED)" }
          : { _tag: "Answered", status: answer, retryAfterMs: null }
      })
  })
  return { received, script, layer: Layer.succeed(WebhookTransport, transport) }
}

/** The webhook delivery services alone, on the fake receiver. */
const deliveryServices = (transport: Layer.Layer<WebhookTransport>) =>
  Layer.mergeAll(Dispatcher.layerWithoutDependencies, WebhookDeliveries.layer).pipe(
    Layer.provideMerge(Webhooks.layerWithoutDependencies),
    Layer.provideMerge(Layer.mergeAll(WebhooksRepo.layer, transport, Secrets.layer)),
    Layer.provideMerge(SqlLive)
  )

/** The services on a database, quiet below warnings, configured by `env` alone. */
const servicesOn = (transport: Layer.Layer<WebhookTransport>, env: Record<string, string>) =>
  ManagedRuntime.make(
    deliveryServices(transport).pipe(
      Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))
    )
  )

const second = 1_000
const minute = 60 * second
/** The schedule under test: three retries, then the delivery fails. */
const schedule = [5 * second, minute, 10 * minute]
// A public IP literal: the URL policy accepts it without resolving a name; the fake transport answers.
const receiverUrl = "https://203.0.114.7/hooks/hookline"

let databaseUrl: string
let receiver: ReturnType<typeof fakeReceiver>
let runtime: ReturnType<typeof servicesOn>
let db: ReturnType<typeof testPool>

beforeAll(async () => {
  databaseUrl = await createDatabase()
  receiver = fakeReceiver()
  runtime = servicesOn(receiver.layer, {
    DATABASE_URL: databaseUrl,
    DATA_DIR: tempDir("hookline-delivery-"),
    WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64url"),
    WEBHOOK_RETRY_SCHEDULE: schedule.map((ms) => `${ms}ms`).join(","),
    // Retries stay within the schedule: no endpoint is disabled for failing in these tests.
    WEBHOOK_DISABLE_AFTER: "30d"
  })
  await runtime.runPromise(Effect.void)
  db = testPool(databaseUrl, 2)
})

afterAll(async () => {
  await runtime.dispose()
  await db.end()
  await dropDatabase(databaseUrl)
})

/** Runs `program` on the services with TestClock as the Clock, starting from the wall clock's time. */
const run = <A, E>(program: Effect.Effect<A, E, ManagedRuntime.ManagedRuntime.Services<typeof runtime>>) =>
  runtime.runPromise(Effect.andThen(TestClock.setTime(Date.now()), program).pipe(Effect.provide(TestClock.layer())))

/** A new account with an enabled webhook on the fake receiver; returns the account id and the signing secret. */
const accountWithWebhook = async () => {
  const accountId = `acct_${randomBytes(8).toString("hex")}`
  await db.query("INSERT INTO accounts (id, plan) VALUES ($1, 'pro')", [accountId])
  const webhook = await run(Effect.flatMap(Webhooks, (webhooks) => webhooks.set(accountId, receiverUrl)))
  if (webhook.secret === undefined) throw new Error("a new webhook shows its secret")
  return { accountId, secret: webhook.secret }
}

/** The requests the receiver got for one event. */
const requestsFor = (eventId: string) => receiver.received.filter((request) => request.headers["webhook-id"] === eventId)

describe("webhook delivery, one service, TestClock", () => {
  test("a failing endpoint is retried on the configured schedule, then given up and recorded", async () => {
    const { accountId, secret } = await accountWithWebhook()
    receiver.script.push(500, 503, "unreachable", 500)

    const { start, steps, delivery, attempts, log } = await run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const dispatcher = yield* Dispatcher
      const deliveries = yield* WebhookDeliveries
      const start = yield* Clock.currentTimeMillis
      const deliveryId = yield* webhooks.enqueueEvent(accountId, "prediction.succeeded", samplePrediction())
      if (deliveryId === null) return yield* Effect.die(new Error("an enabled webhook takes the event"))

      // What each dispatcher pass attempted: due at once, then just before and at each retry.
      const steps: Array<number> = [yield* dispatcher.deliverDue]
      const afterFirst = yield* deliveries.get(accountId, deliveryId)
      for (const delay of schedule) {
        yield* TestClock.adjust(delay - 1)
        steps.push(yield* dispatcher.deliverDue)
        yield* TestClock.adjust(1)
        steps.push(yield* dispatcher.deliverDue)
      }
      // Long after the last retry, nothing more is sent.
      yield* TestClock.adjust("1 day")
      steps.push(yield* dispatcher.deliverDue)
      const delivery = yield* deliveries.get(accountId, deliveryId)
      const log = yield* deliveries.list(accountId, { status: "failed" })
      return { start, steps, delivery, attempts: afterFirst, log }
    }))

    expect(steps).toEqual([1, 0, 1, 0, 1, 0, 1, 0])
    // After the first attempt the log shows it pending, due one schedule step later.
    expect(attempts).toMatchObject({ status: "pending", attempts: 1, last_status_code: 500, last_error: "answered 500" })
    expect(attempts.next_attempt_at).toBe(new Date(start + schedule[0]).toISOString())

    const sent = requestsFor(delivery.event_id)
    let due = start
    expect(sent.map((request) => request.at)).toEqual([0, ...schedule].map((delay) => (due += delay)))
    for (const request of sent) {
      // The same event every time (same id, same bytes), signed afresh at the attempt's second.
      expect(request.url).toBe(receiverUrl)
      expect(request.body).toBe(sent[0].body)
      const timestamp = Number(request.headers["webhook-timestamp"])
      expect(timestamp).toBe(Math.floor(request.at / 1000))
      expect(request.headers["webhook-signature"]).toBe(sign(secret, delivery.event_id, timestamp, request.body))
    }
    expect(JSON.parse(sent[0].body)).toMatchObject({ id: delivery.event_id, type: "prediction.succeeded" })

    // What the user sees: failed after four attempts, the last answer kept, completed at the last attempt.
    expect(delivery).toMatchObject({
      object: "webhook_delivery",
      event_type: "prediction.succeeded",
      status: "failed",
      attempts: 4,
      last_status_code: 500,
      last_error: "answered 500",
      next_attempt_at: null,
      completed_at: new Date(sent[3].at).toISOString(),
      created_at: new Date(start).toISOString()
    })
    expect(log.data.map((row) => row.id)).toContain(delivery.id)

    const { rows } = await db.query<{ attempt: number; status_code: number | null; error: string | null; attempted_at: Date }>(
      "SELECT attempt, status_code, error, attempted_at FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt",
      [delivery.id]
    )
    expect(rows.map((row) => [row.attempt, row.status_code, row.error, row.attempted_at.getTime()])).toEqual([
      [1, 500, "answered 500", sent[0].at],
      [2, 503, "answered 503", sent[1].at],
      [3, null, "connection failed (ECONNREFUSED)", sent[2].at],
      [4, 500, "answered 500", sent[3].at]
    ])
  })

  test("a 2xx answer stops the retries and is recorded as delivered", async () => {
    const { accountId } = await accountWithWebhook()
    receiver.script.push(503)

    const { steps, delivery, start } = await run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const dispatcher = yield* Dispatcher
      const deliveries = yield* WebhookDeliveries
      const start = yield* Clock.currentTimeMillis
      const deliveryId = yield* webhooks.enqueueEvent(accountId, "prediction.failed", samplePrediction())
      if (deliveryId === null) return yield* Effect.die(new Error("an enabled webhook takes the event"))
      const steps = [yield* dispatcher.deliverDue]
      yield* TestClock.adjust(schedule[0])
      steps.push(yield* dispatcher.deliverDue)
      for (const delay of schedule) {
        yield* TestClock.adjust(delay)
        steps.push(yield* dispatcher.deliverDue)
      }
      return { steps, start, delivery: yield* deliveries.get(accountId, deliveryId) }
    }))

    expect(steps).toEqual([1, 1, 0, 0, 0])
    expect(requestsFor(delivery.event_id).map((request) => request.at)).toEqual([start, start + schedule[0]])
    expect(delivery).toMatchObject({
      event_type: "prediction.failed",
      status: "delivered",
      attempts: 2,
      last_status_code: 200,
      last_error: null,
      next_attempt_at: null,
      completed_at: new Date(start + schedule[0]).toISOString()
    })
  })

  test("410 Gone fails the delivery at once and disables the webhook", async () => {
    const { accountId } = await accountWithWebhook()
    receiver.script.push(410)

    const { steps, delivery, webhook } = await run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const dispatcher = yield* Dispatcher
      const deliveries = yield* WebhookDeliveries
      const deliveryId = yield* webhooks.enqueueEvent(accountId, "prediction.succeeded", samplePrediction())
      if (deliveryId === null) return yield* Effect.die(new Error("an enabled webhook takes the event"))
      const steps = [yield* dispatcher.deliverDue]
      yield* TestClock.adjust("1 day")
      steps.push(yield* dispatcher.deliverDue)
      return { steps, delivery: yield* deliveries.get(accountId, deliveryId), webhook: yield* webhooks.get(accountId) }
    }))

    expect(steps).toEqual([1, 0])
    expect(delivery).toMatchObject({ status: "failed", attempts: 1, last_status_code: 410 })
    expect(webhook).toMatchObject({ configured: false, disabled_reason: "gone", disabled_at: delivery.completed_at })
  })

  test("the background dispatcher, forked under TestClock, retries when the clock reaches the next attempt", async () => {
    const { accountId } = await accountWithWebhook()
    receiver.script.push(500)
    /** Resolves once the dispatcher's LISTEN is registered (a new event's NOTIFY then wakes the loop). */
    const listening = async () => {
      for (let look = 0; look < 500; look++) {
        const { rows: [row] } = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%hookline_webhook_deliveries%'`
        )
        if (row.n > 0) return
        await Bun.sleep(10)
      }
      throw new Error("the dispatcher never listened for new deliveries")
    }
    /** Waits (in real time) for `sent` requests of the event, moving the clock by `nudge` between looks. */
    const sentCount = (eventId: string, sent: number, nudge: Duration.Input) =>
      Effect.gen(function*() {
        for (let look = 0; look < 200; look++) {
          if (requestsFor(eventId).length >= sent) return
          yield* Effect.promise(() => Bun.sleep(10))
          yield* TestClock.adjust(nudge)
        }
        return yield* Effect.die(new Error(`the dispatcher did not send attempt ${sent}`))
      })

    const { first, early, second, delivery } = await run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const deliveries = yield* WebhookDeliveries
      const loop = yield* Effect.forkChild(Effect.scoped(Effect.flatMap(Dispatcher, (dispatcher) => dispatcher.run)))
      const deliveryId = yield* webhooks.enqueueEvent(accountId, "prediction.succeeded", samplePrediction())
      if (deliveryId === null) return yield* Effect.die(new Error("an enabled webhook takes the event"))
      const { event_id: eventId } = yield* deliveries.get(accountId, deliveryId)
      // LISTEN wakes the loop; before it is listening, the next poll (a second of TestClock) does.
      yield* sentCount(eventId, 1, "1 second")
      const first = requestsFor(eventId)[0].at
      // A millisecond before the retry is due, the loop claims what is due: a new event, enqueued then
      // (its NOTIFY wakes the loop), is sent; the retry, were it due, would have been claimed first.
      yield* TestClock.adjust(first + schedule[0] - 1 - (yield* Clock.currentTimeMillis))
      yield* Effect.promise(() => listening())
      const witnessId = yield* webhooks.enqueueEvent(accountId, "prediction.succeeded", samplePrediction())
      if (witnessId === null) return yield* Effect.die(new Error("an enabled webhook takes the event"))
      yield* sentCount((yield* deliveries.get(accountId, witnessId)).event_id, 1, "0 millis")
      const early = requestsFor(eventId).length
      yield* TestClock.adjust(1)
      yield* sentCount(eventId, 2, "10 millis")
      yield* Fiber.interrupt(loop)
      return { first, early, second: requestsFor(eventId)[1].at, delivery: yield* deliveries.get(accountId, deliveryId) }
    }))

    expect(early).toBe(1)
    // Due at first + 5 s, and sent without 5 s of real time passing: the loop looks again at
    // the clock's next step (the nudges above move it at most 2 s, a load-proof bound).
    expect(second - first).toBeGreaterThanOrEqual(schedule[0])
    expect(second - first).toBeLessThanOrEqual(schedule[0] + 2_000)
    expect(delivery).toMatchObject({ status: "delivered", attempts: 2, last_status_code: 200 })
  })
})
