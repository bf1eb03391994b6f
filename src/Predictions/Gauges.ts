/** The Predictions room's gauges on /metrics: jobs by state, and the queue of jobs waiting, read from its tables. */
import { Effect, Layer } from "effect"
import { Metrics, recordJobsByState, recordQueue } from "../Observability/Metrics.js"
import { currentDate } from "../Repository.js"
import { JobsRepo } from "./JobsRepo.js"

export const PredictionGaugesLive = Layer.effectDiscard(Effect.gen(function*() {
  const metrics = yield* Metrics
  const repo = yield* JobsRepo
  yield* metrics.registerGauges(Effect.gen(function*() {
    const oldestQueuedSeconds = yield* repo.oldestQueuedSeconds(yield* currentDate)
    const counts = yield* repo.countByStatus()
    recordJobsByState(counts)
    recordQueue("predictions", counts.find((row) => row.status === "queued")?.n ?? 0, oldestQueuedSeconds)
  }))
})).pipe(Layer.provide(JobsRepo.layer))
