/**
 * The workers: a pool of fibers (WORKER_CONCURRENCY, default one per core) that claim queued
 * jobs with `FOR UPDATE SKIP LOCKED`, fairly across accounts, score them and finish them. Woken by LISTEN/NOTIFY on a
 * real Postgres, by this process's own queueing, and by polling (the only way in embedded mode,
 * and the fallback everywhere).
 *
 * A running job heart-beats; a worker that loses its claim (its heartbeat was late and the
 * sweeper re-queued the job) stops scoring and writes nothing. On shutdown a worker hands its
 * job back to the queue at once (the attempt is not counted); a worker that dies without
 * shutting down leaves a stale heartbeat, and the sweeper re-queues the job.
 */
import { Cause, Clock, Data, Effect, Layer, Option } from "effect"
import { hostname } from "node:os"
import { randomToken } from "../Ids.js"
import { recordJobRun } from "../Observability/Metrics.js"
import { linkedTo } from "../Observability/Tracing.js"
import { DatabaseMode, listenForever, logBackgroundFailure } from "../Sql.js"
import { BlobStore } from "./BlobStore.js"
import { PredictionsConfig } from "./Config.js"
import { PredictionJobs } from "./Jobs.js"
import { jobsChannel } from "./JobsRepo.js"
import type { ClaimedJob } from "./Rows.js"
import type { Outcome } from "./Outcome.js"
import { ClipScorer } from "./Scorer.js"
import { WorkSignal } from "./WorkSignal.js"

class LostClaim extends Data.TaggedError("LostClaim")<{}> {}

/**
 * Scores a claimed job's clip: its outcome, never an error (a scorer's defect fails the job
 * with analysis_failed).
 */
export const scoreJob = (blobs: typeof BlobStore.Service, scorer: typeof ClipScorer.Service) => (job: ClaimedJob): Effect.Effect<Outcome> =>
  (job.blob_key === null
    ? Effect.die(new Error(`Job ${job.id} has no stored file`))
    : blobs.withLocalFile(job.blob_key, (path) => scorer.score({ path }))).pipe(
      Effect.map((score): Outcome => ({ status: "succeeded", score })),
      Effect.catchTag("ScoreFailure", (failure) =>
        Effect.succeed<Outcome>({
          status: "failed",
          type: failure.type,
          message: failure.message,
          durationSec: failure.durationSec
        })),
      Effect.catchDefect((defect) =>
        Effect.logError("clip analysis failed", Cause.die(defect)).pipe(
          Effect.as<Outcome>({
            status: "failed",
            type: "analysis_failed",
            message: "The clip could not be analysed.",
            durationSec: null
          })
        ))
    )

/** Jobs queued by any process wake this one's workers (LISTEN, taken again after a lost connection). */
const listenForQueuedJobs = (signal: typeof WorkSignal.Service) => listenForever(jobsChannel, signal.wake)

export const WorkerLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const jobs = yield* PredictionJobs
    const score = scoreJob(yield* BlobStore, yield* ClipScorer)
    const signal = yield* WorkSignal
    const mode = yield* DatabaseMode
    const config = yield* PredictionsConfig
    const workerId = `${hostname()}:${process.pid}:${randomToken(6)}`

    /** Fails with LostClaim as soon as the job is no longer this worker's. */
    const heartbeat = (id: string) =>
      jobs.heartbeat(id, workerId).pipe(
        Effect.flatMap((held) => held ? Effect.void : Effect.fail(new LostClaim())),
        Effect.delay(config.heartbeatInterval),
        Effect.forever
      )

    /** Shutdown: the job goes straight back to the queue, this attempt not counted. */
    const handBack = (id: string) =>
      jobs.handBack(id, workerId).pipe(Effect.catchCause((cause) => Effect.logWarning("could not hand a job back", cause)))

    const work = (job: ClaimedJob) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const ran = (outcome: "succeeded" | "failed" | "lost") =>
          Effect.andThen(
            Effect.annotateCurrentSpan("hookline.outcome", outcome),
            Effect.flatMap(Clock.currentTimeMillis, (now) => recordJobRun(outcome, (now - started) / 1000))
          )
        yield* Effect.gen(function*() {
          const outcome = yield* Effect.raceFirst(score(job), heartbeat(job.id))
          const finished = yield* jobs.finishAndDiscard(job.id, outcome, { _tag: "HeldBy", workerId })
          yield* ran(finished ? outcome.status : "lost")
        }).pipe(
          Effect.catchTag("LostClaim", () =>
            Effect.logWarning("lost the claim on a job; another worker has it").pipe(
              Effect.annotateLogs({ prediction_id: job.id }),
              Effect.andThen(ran("lost"))
            ))
        )
      }).pipe(
        Effect.annotateLogs({ prediction_id: job.id, attempt: job.attempts }),
        Effect.withSpan("Predictions.work", {
          attributes: { predictionId: job.id, attempt: job.attempts },
          links: linkedTo(job.trace_parent)
        })
      )

    // One job claimed and worked (false: queue empty). The hand-back is in place before the claim
    // can be interrupted, or a shutdown left the job 'running' until the heartbeat timeout.
    const claimAndWork = Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(jobs.claimNextJob(workerId), (job) =>
        Option.isNone(job)
          ? Effect.succeed(false)
          : restore(work(job.value)).pipe(Effect.onInterrupt(() => handBack(job.value.id)), Effect.as(true)))
    )

    /** Claims and runs jobs until the queue is empty; true when at least one ran. */
    const drain = Effect.gen(function*() {
      let ran = false
      while (yield* claimAndWork) ran = true
      return ran
    })

    const workerLoop = Effect.gen(function*() {
      while (true) {
        const seen = yield* signal.generation
        yield* drain.pipe(
          // Then waits like an idle worker: the LISTEN taken again after an outage wakes it at once.
          Effect.catchCause(logBackgroundFailure("worker iteration failed"))
        )
        yield* signal.waitAfter(seen, config.pollInterval)
      }
    })

    if (!mode.embedded) yield* Effect.forkScoped(listenForQueuedJobs(signal))
    for (let i = 0; i < config.workerConcurrency; i++) {
      yield* Effect.forkScoped(workerLoop.pipe(Effect.annotateLogs({ worker: i })))
    }
  })
)
