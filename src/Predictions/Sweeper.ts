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
 * processes sweeping at once never move a row twice.
 *
 * With presigned S3 uploads a watcher plays the object trigger: every S3_UPLOAD_WATCH_INTERVAL
 * it lists the bucket's `uploads/` folder once and lands the objects of pending links. Pending
 * links without an object cost nothing, so no number of them can delay another tenant's upload.
 * An object under a link that was already used (S3 takes a presigned PUT again until the link
 * expires), expired or unknown is deleted.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Option, Schedule } from "effect"
import { orDieOnDb } from "../Sql.js"
import { BlobStore } from "./BlobStore.js"
import { jobBlobKey, Predictions } from "./Predictions.js"
import { WorkSignal } from "./WorkSignal.js"

const batch = 100

/** Where presigned links put their objects: `uploads/<upload id>`. */
const uploadsFolder = "uploads/"
const uploadKey = /^uploads\/upl_[0-9a-f]{32}$/

export const PredictionsSweeperLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const predictions = yield* Predictions
    const blobs = yield* BlobStore
    const signal = yield* WorkSignal
    const config = predictions.config
    const presigned = Option.isSome(blobs.presignedPut)

    const objectArrived = (blobKey: string | null) =>
      presigned && blobKey !== null ? Effect.map(blobs.size(blobKey), Option.isSome) : Effect.succeed(false)

    const expireLinks = Effect.gen(function*() {
      const due = yield* sql<{ id: string; blob_key: string | null }>`
        SELECT id, blob_key FROM uploads WHERE status = 'pending' AND expires_at <= now() ORDER BY expires_at LIMIT ${batch}`
      for (const upload of due) {
        // A presigned PUT may have finished just before the link ran out, unseen by the watcher yet.
        if (yield* objectArrived(upload.blob_key)) {
          yield* predictions.landStoredObject(upload.id)
          continue
        }
        const expired = yield* Effect.gen(function*() {
          const rows = yield* sql<{ prediction_id: string }>`
            UPDATE uploads SET status = 'expired'
             WHERE id = ${upload.id} AND status = 'pending' AND expires_at <= now()
            RETURNING prediction_id`
          if (rows[0] === undefined) return null
          yield* predictions.finish(rows[0].prediction_id, {
            status: "failed",
            type: "upload_expired",
            message: "The upload link expired before a file arrived.",
            durationSec: null
          }, sql`status = 'awaiting_upload'`)
          return rows[0].prediction_id
        }).pipe(sql.withTransaction)
        if (expired !== null) yield* predictions.discardBlob(expired)
      }
    })

    const releaseStalledReceives = Effect.gen(function*() {
      const stalled = yield* sql<{ id: string; prediction_id: string; blob_key: string | null }>`
        SELECT id, prediction_id, blob_key FROM uploads
         WHERE status = 'receiving' AND receiving_started_at <= now() - make_interval(secs => ${Duration.toSeconds(config.uploadReceiveTimeout)})
         LIMIT ${batch}`
      for (const upload of stalled) {
        // The partial file goes first, while no other PUT can be writing it.
        if (upload.blob_key !== null) yield* blobs.remove(upload.blob_key)
        // A presigned landing that died mid-copy may have left part of the job's copy.
        if (presigned) yield* blobs.remove(jobBlobKey(upload.prediction_id))
        yield* Effect.gen(function*() {
          const rows = yield* sql<{ status: string; prediction_id: string }>`
            UPDATE uploads
               SET status = CASE WHEN expires_at > now() THEN 'pending' ELSE 'expired' END, receiving_started_at = NULL
             WHERE id = ${upload.id} AND status = 'receiving'
               AND receiving_started_at <= now() - make_interval(secs => ${Duration.toSeconds(config.uploadReceiveTimeout)})
            RETURNING status, prediction_id`
          if (rows[0]?.status === "expired") {
            yield* predictions.finish(rows[0].prediction_id, {
              status: "failed",
              type: "upload_expired",
              message: "The upload link expired before a complete file arrived.",
              durationSec: null
            }, sql`status = 'awaiting_upload'`)
          }
        }).pipe(sql.withTransaction)
      }
    })

    const heartbeatCutoff = sql`heartbeat_at <= now() - make_interval(secs => ${Duration.toSeconds(config.heartbeatTimeout)})`

    const requeueStalled = Effect.gen(function*() {
      const stalled = yield* sql<{ id: string }>`
        SELECT id FROM predictions WHERE status = 'running' AND ${heartbeatCutoff} LIMIT ${batch}`
      for (const { id } of stalled) {
        const requeued = yield* sql`
          UPDATE predictions SET status = 'queued', claimed_by = NULL, heartbeat_at = NULL, queued_at = now()
           WHERE id = ${id} AND status = 'running' AND ${heartbeatCutoff} AND attempts < ${config.maxAttempts}
          RETURNING id`
        if (requeued.length > 0) {
          yield* Effect.logWarning("re-queued a job whose worker stopped heart-beating").pipe(Effect.annotateLogs({ prediction_id: id }))
          yield* predictions.announceQueued
          yield* signal.wake
          continue
        }
        const failed = yield* predictions.finish(id, {
          status: "failed",
          type: "analysis_failed",
          message: `The analysis stopped ${config.maxAttempts} times without finishing.`,
          durationSec: null
        }, sql`status = 'running' AND ${heartbeatCutoff} AND attempts >= ${config.maxAttempts}`)
        if (failed) yield* predictions.discardBlob(id)
      }
    })

    const expireQueued = Effect.gen(function*() {
      const cutoff = sql`queued_at <= now() - make_interval(secs => ${Duration.toSeconds(config.queueTimeout)})`
      const waiting = yield* sql<{ id: string }>`
        SELECT id FROM predictions WHERE status = 'queued' AND ${cutoff} ORDER BY queued_at LIMIT ${batch}`
      for (const { id } of waiting) {
        const failed = yield* predictions.finish(id, {
          status: "failed",
          type: "expired",
          message: `The job waited in the queue longer than ${Duration.format(config.queueTimeout)}.`,
          durationSec: null
        }, sql`status = 'queued' AND ${cutoff}`)
        if (failed) yield* predictions.discardBlob(id)
      }
    })

    const expireUnpaid = Effect.gen(function*() {
      const landedBefore = sql`received_at <= now() - make_interval(secs => ${Duration.toSeconds(config.unpaidRetention)})`
      const waiting = yield* sql<{ id: string }>`
        SELECT p.id FROM predictions p JOIN uploads u ON u.prediction_id = p.id
         WHERE p.status = 'awaiting_upload' AND u.status = 'received'
           AND u.received_at <= now() - make_interval(secs => ${Duration.toSeconds(config.unpaidRetention)})
         LIMIT ${batch}`
      for (const { id } of waiting) {
        const failed = yield* predictions.finish(id, {
          status: "failed",
          type: "expired",
          message: `The clip waited for credits longer than ${Duration.format(config.unpaidRetention)}.`,
          durationSec: null
        }, sql`status = 'awaiting_upload' AND EXISTS (SELECT 1 FROM uploads WHERE prediction_id = ${id} AND status = 'received' AND ${landedBefore})`)
        if (failed) yield* predictions.discardBlob(id)
      }
    })

    const deleteLeftoverFiles = Effect.gen(function*() {
      const leftovers = yield* sql<{ prediction_id: string }>`
        SELECT u.prediction_id FROM uploads u JOIN predictions p ON p.id = u.prediction_id
         WHERE u.blob_key IS NOT NULL AND p.status IN ('succeeded', 'failed')
         LIMIT ${batch}`
      for (const { prediction_id } of leftovers) yield* predictions.discardBlob(prediction_id)
    })

    const step = (name: string, effect: Effect.Effect<void, unknown>) =>
      effect.pipe(Effect.catchAllCause((cause) => Effect.logError(`predictions sweep: ${name} failed`, cause)))

    const sweep = Effect.all([
      step("expire links", orDieOnDb(expireLinks)),
      step("release stalled uploads", orDieOnDb(releaseStalledReceives)),
      step("re-queue stalled jobs", orDieOnDb(requeueStalled)),
      step("expire queued jobs", orDieOnDb(expireQueued)),
      step("expire unpaid clips", orDieOnDb(expireUnpaid)),
      step("delete files", orDieOnDb(deleteLeftoverFiles))
    ], { discard: true }).pipe(Effect.withSpan("Predictions.sweep"))

    yield* sweep.pipe(Effect.repeat(Schedule.spaced(config.sweepInterval)), Effect.forkScoped)

    if (presigned) {
      const watch = Effect.gen(function*() {
        const keys = (yield* blobs.list(uploadsFolder)).filter((key) => uploadKey.test(key))
        if (keys.length === 0) return
        const uploads = yield* sql<{ id: string; status: string; blob_key: string | null }>`
          SELECT id, status, blob_key FROM uploads WHERE id IN ${sql.in(keys.map((key) => key.slice(uploadsFolder.length)))}`
        const byId = new Map(uploads.map((upload) => [upload.id, upload]))
        for (const key of keys) {
          const upload = byId.get(key.slice(uploadsFolder.length))
          if (upload?.status === "pending") yield* predictions.landStoredObject(upload.id)
          // Being landed right now, or the job's own file (proxy mode keeps it here): left alone.
          else if (upload?.status !== "receiving" && upload?.blob_key !== key) yield* blobs.remove(key)
        }
      }).pipe(orDieOnDb, (effect) => step("watch presigned uploads", effect))
      yield* watch.pipe(Effect.repeat(Schedule.spaced(blobs.watchInterval)), Effect.forkScoped)
    }
  })
)
