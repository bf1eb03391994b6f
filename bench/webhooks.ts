/**
 * Webhook delivery bench: a real server (default dispatcher settings, Postgres with
 * LISTEN/NOTIFY) delivering to a loopback receiver, then the bare dispatcher
 * (bench/support/bareDispatcher.ts: the same SQL with pg + fetch) on the same outbox.
 *
 * - Throughput: a burst of events committed in one transaction, timed until the receiver has
 *   them all (events per second).
 * - Latency: events committed one by one, spaced out so they do not queue behind each other;
 *   the time from the event's commit (`created_at` in the payload, set just before it) to its
 *   arrival at the receiver, p50 and p99. This is the delay a user sees between a prediction
 *   finishing and its webhook.
 *
 * Run alone: `bun bench/webhooks.ts [--quick]`.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { randomBytes } from "node:crypto"
import type { Prediction } from "../src/Predictions/Api.js"
import { WebhookConfig } from "../src/Webhooks/Config.js"
import { Webhooks } from "../src/Webhooks/Webhooks.js"
import { eventually, type Receiver, startReceiver } from "../test/support/receiver.js"
import { servicesRuntime } from "../test/support/runtime.js"
import { startTestServer } from "../test/support/server.js"
import { startBareDispatcher } from "./support/bareDispatcher.js"
import { LatencyRecorder, type LoadResult } from "./support/load.js"
import { poolSize } from "./support/processes.js"
import { type BenchOptions, renderTable, type ScenarioResult } from "./support/report.js"

const prediction = (): Prediction => ({
  object: "prediction",
  id: `pred_${randomBytes(16).toString("hex")}`,
  status: "succeeded",
  created_at: new Date().toISOString(),
  completed_at: new Date().toISOString(),
  input: { duration_sec: 14.2 },
  result: { band: "high", hook_duration_sec: 1.4, category: null, hook_text: null, hook_text_confidence: null, similar_hooks: [] },
  error: null
})

/** Burst throughput and one-at-a-time latency of whatever dispatcher is running now. */
const measureDelivery = async (
  receiver: Receiver,
  enqueue: (count: number) => Promise<void>,
  burstEvents: number,
  latencyEvents: number
): Promise<LoadResult> => {
  receiver.clear()
  // Burst: all committed at once, then delivered as fast as the dispatcher goes.
  await enqueue(burstEvents)
  const burstStart = performance.now()
  await eventually("the burst delivered", () => receiver.requests.length >= burstEvents, 600_000)
  const burstSeconds = (performance.now() - burstStart) / 1000
  receiver.clear()

  // Latency: one event at a time, from its commit (created_at, set just before) to its arrival.
  for (let i = 0; i < latencyEvents; i++) {
    await enqueue(1)
    await Bun.sleep(25)
  }
  await eventually("the latency events delivered", () => receiver.requests.length >= latencyEvents, 120_000)
  const latencies = new LatencyRecorder()
  for (const request of receiver.requests) {
    latencies.record(request.receivedAt - Date.parse((JSON.parse(request.body) as { created_at: string }).created_at))
  }
  const [p50Ms, p90Ms, p99Ms, maxMs] = latencies.percentiles(50, 90, 99, 100)
  const failed = receiver.requests.filter((request) => request.answered !== 200).length
  return {
    ok: burstEvents,
    errors: failed,
    seconds: burstSeconds,
    throughput: burstEvents / burstSeconds,
    p50Ms,
    p90Ms,
    p99Ms,
    maxMs,
    firstError: failed === 0 ? null : `${failed} requests not answered 200`
  }
}

export const runWebhooksBench = async ({ quick }: BenchOptions): Promise<Array<ScenarioResult>> => {
  const burstEvents = quick ? 300 : 3_000
  const latencyEvents = quick ? 40 : 200
  const secretKey = randomBytes(32).toString("base64url")
  const env = { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true", WEBHOOK_SECRET_KEY: secretKey }
  const receiver = startReceiver()
  const server = await startTestServer(env)
  const runtime = servicesRuntime(server.databaseUrl, { ...env, DATA_DIR: server.dataDir })
  try {
    const { accountId, key } = await server.account()
    const put = await server.request("/v1/webhooks", { method: "PUT", key, body: { url: receiver.url } })
    if (put.status !== 200) throw new Error(`webhook: ${put.status} ${JSON.stringify(put.body)}`)
    const { concurrency } = await runtime.runPromise(Effect.gen(function*() {
      return yield* WebhookConfig
    }))

    const enqueue = (count: number) =>
      runtime.runPromise(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const webhooks = yield* Webhooks
          yield* Effect.forEach(
            Array.from({ length: count }),
            () => webhooks.enqueueEvent(accountId, "prediction.succeeded", prediction()),
            { discard: true }
          ).pipe(sql.withTransaction)
        })
      )

    const hookline = await measureDelivery(receiver, enqueue, burstEvents, latencyEvents)
    // The server's dispatcher stops; the bare one takes the same outbox, same receiver.
    await server.stop()
    const bare = await startBareDispatcher({ databaseUrl: server.databaseUrl, secretKey, concurrency, poolSize })
    const baseline = await measureDelivery(receiver, enqueue, burstEvents, latencyEvents).finally(() => bare.stop())

    return [{
      scenario: "webhook delivery",
      operation: `${burstEvents} events committed at once → signed POSTs to a loopback receiver, ${concurrency} in flight`,
      unit: "events/s",
      hookline,
      baseline,
      note: `throughput: the burst until its last delivery; latency: ${latencyEvents} events one at a time, ` +
        "commit → arrival (LISTEN/NOTIFY wake-up included). Baseline: the same claim and record SQL with pg + fetch " +
        "(bench/support/bareDispatcher.ts)."
    }]
  } finally {
    await runtime.dispose()
    await server.close()
    await receiver.stop()
  }
}

if (import.meta.main) {
  const rows = await runWebhooksBench({ quick: process.argv.includes("--quick") })
  console.log(renderTable(rows))
}
