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
import { SqlClient } from "@effect/sql"
import { Cause, Clock, Data, Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { hostname } from "node:os"
import { randomToken } from "../Ids.js"
import { recordJobRun } from "../Observability/Metrics.js"
import { linkedTo } from "../Observability/Tracing.js"
import { DatabaseMode, listen, orDieOnDb } from "../Sql.js"
import { BlobStore } from "./BlobStore.js"
import { jobsChannel, type Outcome, Predictions } from "./Predictions.js"
import { WorkSignal } from "./WorkSignal.js"
import { ClipScorer } from "./Scorer.js"

class LostClaim extends Data.TaggedError("LostClaim")<{}> {}

interface ClaimedJob {
  readonly id: string
  readonly attempts: number
  readonly blob_key: string | null
  /** W3C traceparent of the request that queued the job. */
  readonly trace_parent: string | null
}

export const WorkerLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const predictions = yield* Predictions
    const scorer = yield* ClipScorer
    const blobs = yield* BlobStore
    const signal = yield* WorkSignal
    const mode = yield* DatabaseMode
    const config = predictions.config
    const workerId = `${hostname()}:${process.pid}:${randomToken(6)}`
    const queueTimeoutSec = Duration.toSeconds(config.queueTimeout)

    /**
     * Fair across accounts: the oldest queued job of the account with the fewest jobs running,
     * so one account's queue cannot hold every worker while another's job waits. Under several
     * processes two claims may read the same running counts (fairness is then approximate for a
     * moment), but SKIP LOCKED and the status guard still give every job exactly one claim.
     */
    const claimNext = sql<ClaimedJob>`
      UPDATE predictions p
         SET status = 'running', attempts = attempts + 1, claimed_by = ${workerId},
             heartbeat_at = now(), started_at = COALESCE(started_at, now())
       WHERE id = (
         SELECT q.id FROM predictions q
           LEFT JOIN (SELECT account_id, count(*) AS jobs FROM predictions WHERE status = 'running' GROUP BY account_id) running
             ON running.account_id = q.account_id
          WHERE q.status = 'queued' AND q.queued_at > now() - make_interval(secs => ${queueTimeoutSec})
          ORDER BY COALESCE(running.jobs, 0), q.queued_at, q.id
          FOR UPDATE OF q SKIP LOCKED
          LIMIT 1)
         AND p.status = 'queued'
      RETURNING p.id, p.attempts, p.trace_parent, (SELECT u.blob_key FROM uploads u WHERE u.prediction_id = p.id) AS blob_key`.pipe(
      Effect.map((rows) => Option.fromNullable(rows[0])),
      orDieOnDb
    )

    /** Fails with LostClaim as soon as the job is no longer this worker's. */
    const heartbeat = (id: string) =>
      sql`UPDATE predictions SET heartbeat_at = now() WHERE id = ${id} AND status = 'running' AND claimed_by = ${workerId} RETURNING id`.pipe(
        orDieOnDb,
        Effect.flatMap((rows) => rows.length === 0 ? Effect.fail(new LostClaim()) : Effect.void),
        Effect.delay(config.heartbeatInterval),
        Effect.forever
      )

    /** Shutdown: the job goes straight back to the queue, this attempt not counted. */
    const handBack = (id: string) =>
      Effect.gen(function*() {
        const rows = yield* sql`
          UPDATE predictions
             SET status = 'queued', claimed_by = NULL, heartbeat_at = NULL, queued_at = now(), attempts = attempts - 1
           WHERE id = ${id} AND status = 'running' AND claimed_by = ${workerId}
          RETURNING id`
        if (rows.length > 0) yield* predictions.announceQueued
      }).pipe(orDieOnDb, Effect.catchAllCause((cause) => Effect.logWarning("could not hand a job back", cause)))

    const scoreJob = (job: ClaimedJob): Effect.Effect<Outcome> =>
      (job.blob_key === null
        ? Effect.dieMessage(`Job ${job.id} has no stored file`)
        : blobs.withLocalFile(job.blob_key, (path) => scorer.score({ path }))).pipe(
        Effect.map((score): Outcome => ({ status: "succeeded", score })),
        Effect.catchTag("ScoreFailure", (failure) =>
          Effect.succeed<Outcome>({
            status: "failed",
            type: failure.type,
            message: failure.message,
            durationSec: failure.durationSec
          })),
        Effect.catchAllDefect((defect) =>
          Effect.logError("clip analysis failed", Cause.die(defect)).pipe(
            Effect.as<Outcome>({
              status: "failed",
              type: "analysis_failed",
              message: "The clip could not be analysed.",
              durationSec: null
            })
          ))
      )

    const work = (job: ClaimedJob) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const ran = (outcome: "succeeded" | "failed" | "lost") =>
          Effect.zipRight(
            Effect.annotateCurrentSpan("hookline.outcome", outcome),
            Effect.flatMap(Clock.currentTimeMillis, (now) => recordJobRun(outcome, (now - started) / 1000))
          )
        yield* Effect.gen(function*() {
          const outcome = yield* Effect.raceFirst(scoreJob(job), heartbeat(job.id))
          const finished = yield* predictions.finish(job.id, outcome, sql`status = 'running' AND claimed_by = ${workerId}`)
          if (finished) yield* predictions.discardBlob(job.id)
          yield* ran(finished ? outcome.status : "lost")
        }).pipe(
          Effect.catchTag("LostClaim", () =>
            Effect.logWarning("lost the claim on a job; another worker has it").pipe(
              Effect.annotateLogs({ prediction_id: job.id }),
              Effect.zipRight(ran("lost"))
            ))
        )
      }).pipe(
        Effect.onInterrupt(() => handBack(job.id)),
        Effect.annotateLogs({ prediction_id: job.id, attempt: job.attempts }),
        Effect.withSpan("Predictions.work", {
          attributes: { predictionId: job.id, attempt: job.attempts },
          links: linkedTo(job.trace_parent)
        })
      )

    /** Claims and runs jobs until the queue is empty; true when at least one ran. */
    const drain = Effect.gen(function*() {
      let ran = false
      while (true) {
        const job = yield* claimNext
        if (Option.isNone(job)) return ran
        ran = true
        yield* work(job.value)
      }
    })

    const workerLoop = Effect.gen(function*() {
      while (true) {
        const seen = yield* signal.generation
        yield* drain.pipe(
          Effect.catchAllCause((cause) =>
            Effect.logError("worker iteration failed", cause).pipe(Effect.zipRight(Effect.sleep(config.pollInterval))))
        )
        yield* signal.waitAfter(seen, config.pollInterval)
      }
    })

    if (!mode.embedded) {
      yield* listen(jobsChannel).pipe(
        Stream.runForEach(() => signal.wake),
        Effect.catchAllCause((cause) => Effect.logWarning("LISTEN for queued jobs stopped; reconnecting", cause)),
        Effect.repeat(Schedule.spaced("1 second")),
        Effect.forkScoped
      )
    }
    for (let i = 0; i < config.workerConcurrency; i++) {
      yield* Effect.forkScoped(workerLoop.pipe(Effect.annotateLogs({ worker: i })))
    }
  })
)
