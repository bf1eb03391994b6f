/**
 * The predictions sweeper (every PREDICTION_SWEEP_INTERVAL, in every process):
 * - upload links that expired unused → failed / upload_expired (nothing was reserved);
 * - PUTs that stopped mid-stream (their process died) → the link is released again, or
 *   expired when its time is up;
 * - running jobs whose heartbeat is older than HEARTBEAT_TIMEOUT → queued again, or failed /
 *   analysis_failed (refunded) after PREDICTION_MAX_ATTEMPTS claims;
 * - jobs queued longer than QUEUE_TIMEOUT → failed / expired (refunded);
 * - landed files still waiting for credits UNPAID_CLIP_RETENTION after they landed → failed / expired;
 * - stored files of terminal jobs → deleted.
 *
 * Each candidate is moved by a conditional UPDATE in its own transaction, so several
 * processes sweeping at once never move a row twice. Every cut-off is measured on Effect's Clock.
 *
 * With presigned S3 uploads a watcher plays the object trigger: every S3_UPLOAD_WATCH_INTERVAL
 * it lists the bucket's `uploads/` folder once and lands the objects of pending links. Pending
 * links without an object cost nothing, so no number of them can delay another tenant's upload.
 * An object under a link that was already used (S3 takes a presigned PUT again until the link
 * expires), expired or unknown is deleted. A round that fails (the bucket cannot be listed, the
 * store does not answer) is retried after twice the last wait, up to S3_UPLOAD_WATCH_MAX_BACKOFF,
 * with one warning per failed round (`hookline_upload_watch_failing_rounds` counts them in a row)
 * and one line once a round works again. With S3 the bucket's access is checked at start and every
 * S3_CHECK_INTERVAL (BucketCheck.ts), for /readyz.
 */
import { Context, Effect, Layer, Option, Schedule, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { logBackgroundFailure, orDieOnDb } from "../Sql.js"
import { BlobStore } from "./BlobStore.js"
import { BucketAccess, UploadWatchMaxBackoff, watchWithBackoff } from "./BucketCheck.js"
import { PredictionsConfig } from "./Config.js"
import { PredictionJobs, sweepBatch } from "./Jobs.js"
import { failedWith } from "./Outcome.js"
import { currentDate } from "../Repository.js"
import { dateBefore } from "./Rows.js"
import { jobBlobKey, PredictionUploads } from "./Uploads.js"
import { UploadsRepo } from "./UploadsRepo.js"

/** Where presigned links put their objects: `uploads/<upload id>`. */
const uploadsFolder = "uploads/"
const uploadKey = /^uploads\/upl_[0-9a-f]{32}$/

/** A sweep step whose failure is logged, so the others still run. */
const step = <R>(name: string, effect: Effect.Effect<void, unknown, R>) =>
  effect.pipe(Effect.catchCause(logBackgroundFailure(`predictions sweep: ${name} failed`)))

/** The predictions' background: the sweeps, the bucket's access check and the presigned-upload watcher. */
export interface PredictionsSweeperService {
  /** One pass of every sweep; a step that fails is logged and the others still run (tests step it). */
  readonly sweep: Effect.Effect<void>
  /**
   * The background of a server process, forked in the caller's scope: the sweep every
   * PREDICTION_SWEEP_INTERVAL, the bucket's access check, and in presigned mode the watcher.
   */
  readonly run: Effect.Effect<void, never, Scope.Scope>
}

/** Presigned mode: one round of the watcher; lands the objects of pending links, deletes objects no link may keep. */
const watchRound = (repo: typeof UploadsRepo.Service, blobs: typeof BlobStore.Service, uploads: typeof PredictionUploads.Service) =>
  Effect.gen(function*() {
    const keys = (yield* blobs.list(uploadsFolder)).filter((key) => uploadKey.test(key))
    if (keys.length === 0) return
    const known = yield* repo.findByIds(keys.map((key) => key.slice(uploadsFolder.length)))
    const byId = new Map(known.map((upload) => [upload.id, upload]))
    for (const key of keys) {
      const upload = byId.get(key.slice(uploadsFolder.length))
      if (upload?.status === "pending") yield* uploads.landStoredObject(upload.id)
      // Being landed right now, or the job's own file (proxy mode keeps it here): left alone.
      else if (upload?.status !== "receiving" && upload?.blob_key !== key) yield* blobs.remove(key)
    }
  })

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const repo = yield* UploadsRepo
  const jobs = yield* PredictionJobs
  const uploads = yield* PredictionUploads
  const blobs = yield* BlobStore
  const access = yield* BucketAccess
  const config = yield* PredictionsConfig
  const watchMaxBackoff = yield* UploadWatchMaxBackoff
  /** Presigned mode: clients PUT straight into the bucket, and the watcher lands what arrives. */
  const presigned = Option.isSome(blobs.presignedPut)

  const objectArrived = (blobKey: string | null) =>
    presigned && blobKey !== null ? Effect.map(blobs.size(blobKey), Option.isSome) : Effect.succeed(false)

  const expireLinks = Effect.gen(function*() {
    for (const upload of yield* repo.findLinksDue({ before: yield* currentDate, limit: sweepBatch })) {
      // A presigned PUT may have finished just before the link ran out, unseen by the watcher yet.
      if (yield* objectArrived(upload.blob_key)) {
        yield* uploads.landStoredObject(upload.id)
        continue
      }
      const expired = yield* Effect.gen(function*() {
        const link = yield* repo.expireLink({ id: upload.id, now: yield* currentDate })
        if (Option.isNone(link)) return null
        const message = "The upload link expired before a file arrived."
        yield* jobs.finish(link.value.prediction_id, failedWith("upload_expired", message), { _tag: "AwaitingUpload" })
        return link.value.prediction_id
      }).pipe(sql.withTransaction)
      if (expired !== null) yield* jobs.discardBlob(expired)
    }
  })

  const releaseStalledReceives = Effect.gen(function*() {
    const startedBefore = yield* dateBefore(config.uploadReceiveTimeout)
    for (const upload of yield* repo.findStalledReceives({ before: startedBefore, limit: sweepBatch })) {
      // The partial file goes first, while no other PUT can be writing it.
      if (upload.blob_key !== null) yield* blobs.remove(upload.blob_key)
      // A presigned landing that died mid-copy may have left part of the job's copy.
      if (presigned) yield* blobs.remove(jobBlobKey(upload.prediction_id))
      yield* Effect.gen(function*() {
        const released = yield* repo.releaseStalledReceive({ id: upload.id, startedBefore, now: yield* currentDate })
        if (Option.isSome(released) && released.value.status === "expired") {
          const message = "The upload link expired before a complete file arrived."
          yield* jobs.finish(released.value.prediction_id, failedWith("upload_expired", message), { _tag: "AwaitingUpload" })
        }
      }).pipe(sql.withTransaction)
    }
  })

  /** One pass of every sweep; a step that fails is logged and the others still run. */
  const sweep = Effect.all([
    step("expire links", orDieOnDb(expireLinks)),
    step("release stalled uploads", orDieOnDb(releaseStalledReceives)),
    step("re-queue stalled jobs", jobs.requeueStalled),
    step("expire queued jobs", jobs.expireQueued),
    step("expire unpaid clips", jobs.expireUnpaid),
    step("delete files", jobs.deleteLeftoverFiles)
  ], { discard: true }).pipe(Effect.withSpan("Predictions.sweep"))

  /** Presigned mode: rounds for as long as the process runs, backing off while they fail. */
  const watchPresigned = watchWithBackoff(watchRound(repo, blobs, uploads), blobs.watchInterval, watchMaxBackoff)

  const background = [sweep.pipe(Effect.repeat(Schedule.spaced(config.sweepInterval))), access.checkForever]
  const run = Effect.forEach(presigned ? [...background, watchPresigned] : background, (task) => Effect.forkScoped(task), {
    discard: true
  })
  return PredictionsSweeper.of({ sweep, run })
})

export class PredictionsSweeper extends Context.Service<PredictionsSweeper, PredictionsSweeperService>()("hookline/PredictionsSweeper") {
  static readonly layerWithoutDependencies = Layer.effect(PredictionsSweeper, make)
  static readonly layer = PredictionsSweeper.layerWithoutDependencies.pipe(
    Layer.provide([UploadsRepo.layer, PredictionJobs.layer, PredictionUploads.layer, BlobStore.layer])
  )
}

/** The sweeper's schedule, the bucket's access check, and in presigned mode the watcher. */
export const PredictionsSweeperLive = Layer.effectDiscard(Effect.flatMap(PredictionsSweeper, (sweeper) => sweeper.run)).pipe(
  Layer.provide(PredictionsSweeper.layer)
)
