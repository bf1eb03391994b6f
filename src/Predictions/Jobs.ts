/**
 * The jobs service: a prediction from queued to terminal (the states are in JobsRepo.ts). It
 * queues a landed job with its credits reserved, gives jobs to the workers (claim, heartbeat,
 * hand back), finishes them (the hold settled or refunded, the webhook event written in the same
 * transaction), and runs the sweeps that re-queue stalled jobs and expire forgotten ones.
 * Every time it measures is Effect's Clock.
 */
import { Context, Duration, Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql"
import type { Caller } from "../Auth/Api.js"
import { NotFound, ValidationFailed } from "../Errors.js"
import { type Balances, Ledger } from "../Ledger/Ledger.js"
import { creditHeaderValues } from "../Ledger/Metering.js"
import { answerInTransaction } from "../Idempotency/Headers.js"
import { currentTraceParent, traced } from "../Observability/Tracing.js"
import { DatabaseMode, orDieOnDb } from "../Sql.js"
import { Webhooks } from "../Webhooks/Webhooks.js"
import { BlobStore } from "./BlobStore.js"
import { PredictionsConfig } from "./Config.js"
import { JobsRepo } from "./JobsRepo.js"
import { currentDate } from "../Repository.js"
import { dateBefore, type FinishGuard, storedHookFields, toPrediction } from "./Rows.js"
import type { PredictionJobsService } from "./Services.js"
import { failedWith, type Outcome, type RetryOutcome } from "./Outcome.js"
import { UploadsRepo } from "./UploadsRepo.js"
import { WorkSignal } from "./WorkSignal.js"
import { predictionPrice } from "../Ledger/Prices.js"

/** Rows a sweep moves at most per pass. */
export const sweepBatch = 100

/** What the jobs service is made of; each part below takes it. */
const dependencies = Effect.gen(function*() {
  return {
    sql: yield* SqlClient.SqlClient,
    repo: yield* JobsRepo,
    uploads: yield* UploadsRepo,
    ledger: yield* Ledger,
    webhooks: yield* Webhooks,
    blobs: yield* BlobStore,
    signal: yield* WorkSignal,
    mode: yield* DatabaseMode,
    config: yield* PredictionsConfig
  } as const
})
type Dependencies = Effect.Success<typeof dependencies>

/** awaiting_upload → queued, the credits reserved (inside the caller's transaction). */
const queueing = ({ ledger, mode, repo }: Dependencies) => {
  /**
   * Announces queued work: NOTIFY is delivered when the surrounding transaction commits. Not in
   * embedded mode, where notifications do not reach a listener (the workers poll).
   */
  const announceQueued = mode.embedded ? Effect.void : repo.announceQueued()

  /**
   * awaiting_upload → queued, inside the caller's transaction with the row locked and its file
   * landed: reserves the credits, counted against the key that created the job. Fails, having
   * changed nothing, with InsufficientCredits when the wallet is short, or SpendLimitReached when
   * the key would pass its spend limit.
   */
  const queue = (predictionId: string, accountId: string, keyId: string, requestId: string | null) =>
    Effect.gen(function*() {
      const hold = yield* ledger.reserve(accountId, predictionPrice, {
        operation: "prediction",
        referenceId: predictionId,
        requestId,
        keyId,
        expires: false
      })
      // The job's trace links back to the request that queued it.
      const traceParent = yield* currentTraceParent
      const queued = yield* repo.queueJob({ id: predictionId, holdId: hold.id, traceParent, now: yield* currentDate })
      if (!queued) return yield* Effect.die(new Error(`Prediction ${predictionId} left awaiting_upload under its lock`))
      yield* announceQueued
      return hold
    })

  /**
   * The consume step of a landing, inside its transaction: None when the job may not be queued
   * (its key was revoked, its account suspended, or it moved on); else the account and whether
   * the credits were reserved (a Failure: the wallet was short, nothing changed).
   */
  const queueLanded = (predictionId: string, requestId: string | null) =>
    Effect.gen(function*() {
      const locked = yield* repo.lockForLanding(predictionId)
      if (Option.isNone(locked) || locked.value.status !== "awaiting_upload") return Option.none()
      const reserved = yield* Effect.result(queue(predictionId, locked.value.account_id, locked.value.key_id, requestId))
      return Option.some({ accountId: locked.value.account_id, reserved })
    })

  return { announceQueued, queue, queueLanded }
}

/** → succeeded | failed, the hold settled or refunded and the event written; then the file deleted. */
const settlement = ({ blobs, ledger, repo, sql, uploads, webhooks }: Dependencies) => {
  const readPrediction = (id: string) =>
    Effect.flatMap(repo.findPrediction(id), Option.match({
      onNone: () => Effect.die(new Error(`No prediction ${id}`)),
      onSome: Effect.succeed
    }))

  /**
   * The terminal transition, in its own transaction: the row moves only while it still meets
   * `guard`, its hold is settled (20) or refunded, and the webhook event is written alongside.
   * Returns false when another process got there first (nothing changed).
   */
  const finish = (predictionId: string, outcome: Outcome, guard: FinishGuard) =>
    Effect.gen(function*() {
      const succeeded = outcome.status === "succeeded"
      const finished = yield* repo.finishJob({
        id: predictionId,
        status: outcome.status,
        result: succeeded
          ? JSON.stringify({
            band: outcome.score.band,
            hook_duration_sec: outcome.score.hookDurationSec,
            category: outcome.score.category,
            ...storedHookFields(outcome.score),
            features: outcome.score.features
          })
          : null,
        errorType: succeeded ? null : outcome.type,
        errorMessage: succeeded ? null : outcome.message,
        durationSec: succeeded ? outcome.score.durationSec : outcome.durationSec,
        now: yield* currentDate,
        guard
      })
      if (Option.isNone(finished)) return false
      const { account_id, hold_id } = finished.value
      if (hold_id !== null) yield* succeeded ? ledger.settle(hold_id, predictionPrice) : ledger.refund(hold_id)
      const prediction = toPrediction(yield* readPrediction(predictionId))
      yield* webhooks.enqueueEvent(account_id, succeeded ? "prediction.succeeded" : "prediction.failed", prediction)
      return true
    }).pipe(sql.withTransaction, orDieOnDb, Effect.uninterruptible)

  /** Deletes the stored file of a terminal job (idempotent; the sweeper retries leftovers). */
  const discardBlob = (predictionId: string) =>
    Effect.gen(function*() {
      for (const file of yield* uploads.findTerminalFiles(predictionId)) {
        yield* blobs.remove(file.blob_key)
        yield* uploads.forgetFile({ id: file.id, blobKey: file.blob_key })
      }
    })

  /** Finishes the job and, when this call moved it, deletes its file. */
  const finishAndDiscard = (predictionId: string, outcome: Outcome, guard: FinishGuard) =>
    Effect.gen(function*() {
      const finished = yield* finish(predictionId, outcome, guard)
      if (finished) yield* discardBlob(predictionId)
      return finished
    })

  return { readPrediction, finish, discardBlob, finishAndDiscard }
}

/** The API's side: retry start and get. */
const requests = (
  { config, ledger, repo, signal, sql }: Dependencies,
  { queue }: ReturnType<typeof queueing>,
  { readPrediction }: ReturnType<typeof settlement>
) => {
  const walletBalances = (accountId: string) =>
    Effect.map(ledger.wallet(accountId), (wallet): Balances => ({ monthly: wallet.monthly, topup: wallet.topup }))

  /**
   * Retry start (POST /v1/predict): retries the consume step for a job whose file landed while
   * credits were short. Queued, running or terminal jobs come back unchanged with 0 charged.
   * One transaction reserves, queues, reads the answer and stores it under the request's
   * Idempotency-Key, so a retry after a COMMIT lost on the way never reserves a second time.
   */
  const retryStart = (caller: Caller, uploadId: string, requestId: string) =>
    Effect.gen(function*() {
      const createdAfter = yield* dateBefore(config.retention)
      const outcome = yield* Effect.gen(function*() {
        const locked = yield* repo.lockForRetryStart({ uploadId, keyId: caller.keyId, createdAfter })
        if (Option.isNone(locked)) return yield* new NotFound({ message: `No upload ${uploadId} for this key.` })
        const row = locked.value
        if (row.status === "awaiting_upload" && row.upload_status !== "received") {
          return yield* new ValidationFailed({
            message: "upload_id: the file has not landed yet; PUT it to the upload_url first."
          })
        }
        const hold = row.status === "awaiting_upload"
          ? yield* queue(row.prediction_id, caller.accountId, caller.keyId, requestId)
          : null
        const prediction = toPrediction(yield* readPrediction(row.prediction_id))
        const retried: RetryOutcome = hold !== null
          ? { prediction, charged: predictionPrice, balances: hold.balancesAfter }
          : { prediction, charged: 0, balances: yield* walletBalances(caller.accountId) }
        yield* answerInTransaction(prediction, creditHeaderValues(retried.charged, retried.balances))
        return retried
      }).pipe(sql.withTransaction)
      if (outcome.charged > 0) yield* signal.wake
      return outcome
    }).pipe(orDieOnDb, traced("Predictions.retryStart"))

  /** Visible only to the key that created it, and only for the retention period. */
  const get = (caller: Caller, id: string) =>
    Effect.gen(function*() {
      const createdAfter = yield* dateBefore(config.retention)
      const found = yield* repo.findVisiblePrediction({ id, keyId: caller.keyId, createdAfter })
      if (Option.isNone(found)) return yield* new NotFound({ message: `No prediction ${id} for this key.` })
      return toPrediction(found.value)
    })

  return { retryStart, get }
}

/** The workers' side: claim, heartbeat, hand back. */
const workerSide = ({ config, repo }: Dependencies, { announceQueued }: ReturnType<typeof queueing>) => {
  const claimNextJob = (workerId: string) =>
    Effect.gen(function*() {
      const queuedAfter = yield* dateBefore(config.queueTimeout)
      return yield* repo.claimNextJob({ workerId, now: yield* currentDate, queuedAfter })
    })

  /** False as soon as the job is no longer this worker's. */
  const heartbeat = (id: string, workerId: string) =>
    Effect.flatMap(currentDate, (now) => repo.heartbeat({ id, workerId, now }))

  /** Shutdown: the job goes straight back to the queue, this attempt not counted. */
  const handBack = (id: string, workerId: string) =>
    Effect.gen(function*() {
      if (yield* repo.handBack({ id, workerId, now: yield* currentDate })) yield* announceQueued
    })

  return { claimNextJob, heartbeat, handBack }
}

/** The sweeps (Sweeper.ts runs them on a schedule). */
const sweeps = (
  { config, repo, signal, uploads }: Dependencies,
  { announceQueued }: ReturnType<typeof queueing>,
  { discardBlob, finishAndDiscard }: ReturnType<typeof settlement>
) => {
  /** Running jobs whose heartbeat is older than HEARTBEAT_TIMEOUT: queued again, or failed (refunded). */
  const requeueStalled = Effect.gen(function*() {
    const heartbeatBefore = yield* dateBefore(config.heartbeatTimeout)
    for (const { id } of yield* repo.findStalled({ before: heartbeatBefore, limit: sweepBatch })) {
      const maxAttempts = config.maxAttempts
      if (yield* repo.requeueStalled({ id, heartbeatBefore, maxAttempts, now: yield* currentDate })) {
        yield* Effect.logWarning("re-queued a job whose worker stopped heart-beating").pipe(Effect.annotateLogs({ prediction_id: id }))
        yield* announceQueued
        yield* signal.wake
        continue
      }
      const message = `The analysis stopped ${maxAttempts} times without finishing.`
      yield* finishAndDiscard(id, failedWith("analysis_failed", message), { _tag: "StalledOut", heartbeatBefore, maxAttempts })
    }
  })

  /** Jobs queued longer than QUEUE_TIMEOUT: failed / expired (refunded). */
  const expireQueued = Effect.gen(function*() {
    const queuedBefore = yield* dateBefore(config.queueTimeout)
    const message = `The job waited in the queue longer than ${Duration.format(config.queueTimeout)}.`
    for (const { id } of yield* repo.findQueuedBefore({ before: queuedBefore, limit: sweepBatch })) {
      yield* finishAndDiscard(id, failedWith("expired", message), { _tag: "QueuedBefore", queuedBefore })
    }
  })

  /** Landed files still waiting for credits UNPAID_CLIP_RETENTION after they landed: failed / expired. */
  const expireUnpaid = Effect.gen(function*() {
    const receivedBefore = yield* dateBefore(config.unpaidRetention)
    const message = `The clip waited for credits longer than ${Duration.format(config.unpaidRetention)}.`
    for (const { id } of yield* repo.findUnpaidBefore({ before: receivedBefore, limit: sweepBatch })) {
      yield* finishAndDiscard(id, failedWith("expired", message), { _tag: "UnpaidBefore", receivedBefore })
    }
  })

  /** Stored files of terminal jobs that a crash left behind. */
  const deleteLeftoverFiles = Effect.gen(function*() {
    for (const { prediction_id } of yield* uploads.findLeftoverFiles(sweepBatch)) yield* discardBlob(prediction_id)
  })

  return { requeueStalled, expireQueued, expireUnpaid, deleteLeftoverFiles }
}

const make = Effect.gen(function*() {
  const deps = yield* dependencies
  const queued = queueing(deps)
  const settled = settlement(deps)
  return PredictionJobs.of({
    queueLanded: queued.queueLanded,
    finish: settled.finish,
    discardBlob: settled.discardBlob,
    finishAndDiscard: settled.finishAndDiscard,
    ...requests(deps, queued, settled),
    ...workerSide(deps, queued),
    ...sweeps(deps, queued, settled)
  })
})

export class PredictionJobs extends Context.Service<PredictionJobs, PredictionJobsService>()("hookline/PredictionJobs") {
  static readonly layerWithoutDependencies = Layer.effect(PredictionJobs, make)
  static readonly layer = PredictionJobs.layerWithoutDependencies.pipe(
    Layer.provide([JobsRepo.layer, UploadsRepo.layer, Ledger.layer, Webhooks.layer, BlobStore.layer, WorkSignal.layer])
  )
}
