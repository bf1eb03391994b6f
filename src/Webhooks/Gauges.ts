/** The Webhooks room's gauges on /metrics: deliveries waiting in the outbox, and how overdue the oldest is. */
import { Effect, Layer } from "effect"
import { Metrics, recordQueue } from "../Observability/Metrics.js"
import { currentDate } from "../Repository.js"
import { WebhooksRepo } from "./Repo.js"

export const WebhookGaugesLive = Layer.effectDiscard(Effect.gen(function*() {
  const metrics = yield* Metrics
  const repo = yield* WebhooksRepo
  yield* metrics.registerGauges(Effect.gen(function*() {
    const outbox = yield* repo.outboxBacklog(yield* currentDate)
    recordQueue("webhooks", outbox.pending, outbox.oldest_due_ms / 1000)
  }))
})).pipe(Layer.provide(WebhooksRepo.layer))
