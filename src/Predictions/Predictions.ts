/**
 * The prediction job's state machine (decisions.md, "Predictions"):
 *
 *   awaiting_upload ──file lands + 20 reserved──▶ queued ──claimed──▶ running ──▶ succeeded (hold settled)
 *        │   ▲ credits short: stays, file kept;         ▲               │   └────▶ failed (hold refunded)
 *        │   └ POST /v1/predict retries the reserve     └─ heartbeat ───┘
 *        │                                                 stopped (≤ 3 attempts)
 *        └─ link expired unused ─▶ failed (upload_expired)      queued > 1 h ─▶ failed (expired, refunded)
 *
 * Every transition is one conditional UPDATE (`WHERE status = …`), so concurrent callers, workers
 * and sweepers in any number of processes agree on a single winner; money moves through the
 * Ledger in the same transaction, and a terminal transition writes its webhook event there too.
 */
import { HttpServerRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import type { Fragment } from "@effect/sql/Statement"
import { Duration, Effect, Either, Exit, Option, Schema, Stream } from "effect"
import type { Caller } from "../Auth/Api.js"
import { publicBaseUrl, ServerConfig } from "../Config.js"
import {
  AuthorizationNotAllowed,
  NotFound,
  RequestId,
  UploadAlreadyUsed,
  UploadExpired,
  ValidationFailed
} from "../Errors.js"
import { newId, randomToken, sha256Hex } from "../Ids.js"
import { type Balances, Ledger } from "../Ledger/Ledger.js"
import { currentTraceParent } from "../Observability/Tracing.js"
import { toTimestamp } from "../Schemas.js"
import { DatabaseMode, orDieOnDb } from "../Sql.js"
import { Webhooks } from "../Webhooks/Webhooks.js"
import { type Prediction, type PredictionErrorType, type PredictUpload, UploadReceipt } from "./Api.js"
import { BlobStore } from "./BlobStore.js"
import { PredictionsConfig } from "./Config.js"
import { UploadQuotas } from "./Quotas.js"
import { PredictionRow, toPrediction, UploadRow } from "./Rows.js"
import type { ClipScore } from "./Scorer.js"
import { checkedVideoBody, type MediaKind, tooLarge, unsupportedMedia } from "./Uploads.js"
import { WorkSignal } from "./WorkSignal.js"

/** Credits a prediction job reserves when it reaches queued, and takes when it succeeds. */
export const PREDICTION_CREDITS = 20

/** Postgres channel on which queued jobs are announced to every process's workers. */
export const jobsChannel = "hookline_predictions"

/** Presigned mode: where a landed clip is copied, out of reach of its upload link. */
export const jobBlobKey = (predictionId: string) => `jobs/${predictionId}`

/** Upload tokens: 24 random bytes (192 bits), URL-safe base64. */
const tokenPattern = /^[A-Za-z0-9_-]{32}$/

/** How a job ends. */
export type Outcome =
  | { readonly status: "succeeded"; readonly score: ClipScore }
  | {
    readonly status: "failed"
    readonly type: PredictionErrorType
    readonly message: string
    readonly durationSec: number | null
  }

export interface RetryOutcome {
  readonly prediction: Prediction
  /** Credits this call reserved (20 or 0). */
  readonly charged: number
  readonly balances: Balances
}

export class Predictions extends Effect.Service<Predictions>()("hookline/Predictions", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger
    const webhooks = yield* Webhooks
    const blobs = yield* BlobStore
    const signal = yield* WorkSignal
    const mode = yield* DatabaseMode
    const config = yield* PredictionsConfig
    const quotas = yield* UploadQuotas
    const server = yield* ServerConfig
    const retentionSec = Duration.toSeconds(config.retention)

    const selectPrediction = sql`
      SELECT p.id, p.account_id, p.status, p.hold_id, p.input_duration_sec, p.result, p.error_type, p.error_message,
             p.created_at, p.completed_at, u.id AS upload_id, u.status AS upload_status
        FROM predictions p JOIN uploads u ON u.prediction_id = p.id`

    const decodePrediction = (rows: ReadonlyArray<unknown>) =>
      rows.length === 0
        ? Effect.succeed(Option.none<PredictionRow>())
        : Effect.map(Schema.decodeUnknown(PredictionRow)(rows[0]), Option.some)

    const readPrediction = (id: string) =>
      sql`${selectPrediction} WHERE p.id = ${id}`.pipe(
        Effect.flatMap(decodePrediction),
        Effect.flatMap(Option.match({
          onNone: () => Effect.dieMessage(`No prediction ${id}`),
          onSome: Effect.succeed
        }))
      )

    /**
     * Announces queued work: NOTIFY is delivered when the surrounding transaction commits. The
     * payload must not be empty: PgClient.listen drops notifications without one.
     */
    const announceQueued = mode.embedded ? Effect.void : sql`SELECT pg_notify(${jobsChannel}, 'queued')`.pipe(Effect.asVoid)

    /**
     * The consume step, inside the caller's transaction with the prediction row locked and its
     * file landed: reserve the credits and move the job to queued. Fails with
     * InsufficientCredits, having changed nothing, when the wallet is short.
     */
    const reserveAndQueue = (predictionId: string, accountId: string, requestId: string | null) =>
      Effect.gen(function*() {
        const hold = yield* ledger.reserve(accountId, PREDICTION_CREDITS, {
          operation: "prediction",
          referenceId: predictionId,
          requestId,
          expires: false
        })
        // The job's trace links back to the request that queued it.
        const traceParent = yield* currentTraceParent
        const moved = yield* sql`
          UPDATE predictions SET status = 'queued', hold_id = ${hold.id}, queued_at = now(), trace_parent = ${traceParent}
           WHERE id = ${predictionId} AND status = 'awaiting_upload'
          RETURNING id`
        if (moved.length === 0) return yield* Effect.dieMessage(`Prediction ${predictionId} left awaiting_upload under its lock`)
        yield* announceQueued
        return hold
      })

    // A link lands only while its key is live and its account not suspended (else nothing is reserved).
    const lockAwaiting = (predictionId: string) =>
      sql<{ status: string; account_id: string }>`
        SELECT p.status, p.account_id FROM predictions p JOIN api_keys k ON k.id = p.key_id JOIN accounts a ON a.id = p.account_id
         WHERE p.id = ${predictionId} AND k.revoked_at IS NULL AND NOT a.suspended FOR UPDATE OF p`.pipe(
        Effect.map((rows) => rows[0]?.status === "awaiting_upload" ? Option.some(rows[0].account_id) : Option.none())
      )

    /**
     * The object trigger: the file of a `receiving` upload is complete. In one transaction the
     * upload becomes received and the job is queued with its credits reserved, or, when the
     * wallet is short, stays awaiting_upload with its file kept (retry start picks it up).
     */
    const land = (
      upload: { readonly id: string; readonly predictionId: string },
      stored: { readonly sizeBytes: number; readonly kind: MediaKind | null; readonly blobKey: string },
      requestId: string | null
    ) =>
      Effect.gen(function*() {
        const queued = yield* Effect.gen(function*() {
          const landed = yield* sql`
            UPDATE uploads
               SET status = 'received', size_bytes = ${stored.sizeBytes}, media_kind = ${stored.kind}, received_at = now(),
                   blob_key = ${stored.blobKey}
             WHERE id = ${upload.id} AND status = 'receiving'
            RETURNING id`
          if (landed.length === 0) return yield* Effect.dieMessage(`Upload ${upload.id} was released while its file landed`)
          const accountId = yield* lockAwaiting(upload.predictionId)
          if (Option.isNone(accountId)) return false
          const reserved = yield* Effect.either(reserveAndQueue(upload.predictionId, accountId.value, requestId))
          if (Either.isLeft(reserved)) {
            // Kept unpaid only within the account's bound; over it the landing rolls back.
            yield* quotas.checkLandedUnpaid(accountId.value)
            yield* Effect.logInfo("clip landed while credits were short; job stays awaiting_upload").pipe(
              Effect.annotateLogs({ prediction_id: upload.predictionId })
            )
          }
          return Either.isRight(reserved)
        }).pipe(sql.withTransaction)
        if (queued) yield* signal.wake
      }).pipe(Effect.uninterruptible)

    /** Puts a link that a failed PUT claimed back to pending, so the caller can try again. */
    const releaseClaim = (uploadId: string) =>
      sql`UPDATE uploads SET status = 'pending', receiving_started_at = NULL WHERE id = ${uploadId} AND status = 'receiving'`.pipe(
        Effect.asVoid
      )

    const findUploadByToken = (tokenHash: string) =>
      sql`
        SELECT u.id, u.prediction_id, u.account_id, u.status, u.blob_key,
               u.expires_at <= now() OR k.revoked_at IS NOT NULL OR a.suspended AS expired -- a link dies with its key
          FROM uploads u JOIN api_keys k ON k.id = u.key_id JOIN accounts a ON a.id = u.account_id
         WHERE u.token_hash = ${tokenHash}`.pipe(
        Effect.flatMap((rows) =>
          rows.length === 0 ? Effect.succeed(Option.none<UploadRow>()) : Effect.map(Schema.decodeUnknown(UploadRow)(rows[0]), Option.some)
        )
      )

    /** 404 unknown, 409 used, 410 expired; None when the link can take a file. */
    const refusal = (upload: UploadRow): Option.Option<UploadAlreadyUsed | UploadExpired> =>
      upload.status === "receiving" || upload.status === "received"
        ? Option.some(new UploadAlreadyUsed({ message: "This upload link was already used." }))
        : upload.status === "expired" || upload.expired
        ? Option.some(new UploadExpired({ message: "This upload link has expired; create a new one." }))
        : Option.none()

    // ------------------------------------------------------------------------------------------
    // The API

    const createUpload = (caller: Caller) =>
      Effect.gen(function*() {
        const predictionId = newId("pred")
        const uploadId = newId("upl")
        const token = randomToken(24)
        const blobKey = `uploads/${uploadId}`
        const rows = yield* Effect.gen(function*() {
          yield* quotas.admitLink(caller.accountId, caller.keyId)
          yield* sql`
            INSERT INTO predictions (id, account_id, key_id, status)
            VALUES (${predictionId}, ${caller.accountId}, ${caller.keyId}, 'awaiting_upload')`
          return yield* sql<{ expires_at: Date }>`
            INSERT INTO uploads (id, prediction_id, account_id, key_id, token_hash, expires_at, blob_key)
            VALUES (${uploadId}, ${predictionId}, ${caller.accountId}, ${caller.keyId}, ${sha256Hex(token)},
                    now() + make_interval(secs => ${Duration.toSeconds(config.uploadLinkTtl)}), ${blobKey})
            RETURNING expires_at`
        }).pipe(sql.withTransaction)
        const uploadUrl = Option.match(blobs.presignedPut, {
          onNone: () => `${publicBaseUrl(server)}/uploads/${token}`,
          onSome: (presign) => presign(blobKey, config.uploadLinkTtl)
        })
        return {
          upload_id: uploadId,
          prediction_id: predictionId,
          upload_url: uploadUrl,
          expires_at: toTimestamp(rows[0].expires_at)
        } satisfies PredictUpload
      }).pipe(orDieOnDb, Effect.withSpan("Predictions.createUpload"))

    /**
     * The upload PUT. The link is claimed (pending → receiving) before a byte is stored, so of
     * two PUTs at once exactly one streams; a PUT that fails (wrong type, too large, client gone)
     * releases the link again. The body is checked and stored as it streams.
     */
    const receiveUpload = (token: string) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (request.headers["authorization"] !== undefined) {
          return yield* new AuthorizationNotAllowed({
            message: "The upload PUT must not carry an Authorization header: the upload_url itself is the credential."
          })
        }
        const notFound = new NotFound({ message: "No such upload link." })
        if (!tokenPattern.test(token)) return yield* notFound
        const tokenHash = sha256Hex(token)
        const found = yield* findUploadByToken(tokenHash)
        if (Option.isNone(found)) return yield* notFound
        const refused = refusal(found.value)
        if (Option.isSome(refused)) return yield* refused.value
        const declared = request.headers["content-length"]
        if (declared !== undefined && Number(declared) > config.uploadMaxBytes) return yield* tooLarge(config.uploadMaxBytes)
        const empty = declared === "0" || (declared === undefined && request.headers["transfer-encoding"] === undefined)
        if (empty) return yield* unsupportedMedia()
        yield* quotas.admitPut(found.value.account_id, Number(declared ?? 0), PREDICTION_CREDITS)

        const claimed = yield* sql`
          UPDATE uploads SET status = 'receiving', receiving_started_at = now()
           WHERE token_hash = ${tokenHash} AND status = 'pending' AND expires_at > now()
          RETURNING id`
        if (claimed.length === 0) {
          // Lost a race: another PUT claimed it, or it expired a moment ago.
          const now = yield* findUploadByToken(tokenHash)
          return yield* Option.getOrElse(Option.flatMap(now, refusal), () =>
            new UploadAlreadyUsed({ message: "This upload link was already used." }))
        }
        const upload = { id: found.value.id, predictionId: found.value.prediction_id }
        const blobKey = found.value.blob_key ?? `uploads/${upload.id}`

        const stored = yield* Effect.scoped(Effect.gen(function*() {
          const body = request.stream.pipe(
            Stream.mapError(() => new ValidationFailed({ message: "The upload ended before the whole body arrived." }))
          )
          const checked = yield* checkedVideoBody(body, config.uploadMaxBytes)
          const blob = yield* blobs.put(blobKey, checked.stream)
          return { kind: checked.kind, sizeBytes: blob.sizeBytes }
        })).pipe(
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : releaseClaim(upload.id).pipe(Effect.orDie))
        )
        yield* land(upload, { ...stored, blobKey }, yield* RequestId).pipe(
          // Over the unpaid bound: the file goes and the link can take it again once credits arrive.
          Effect.tapError(() => blobs.remove(blobKey).pipe(Effect.zipRight(releaseClaim(upload.id))))
        )
        return { object: "upload", upload_id: upload.id, status: "received" } satisfies typeof UploadReceipt.Type
      }).pipe(orDieOnDb, Effect.withSpan("Predictions.receiveUpload"))

    /**
     * Retry start (POST /v1/predict): retries the consume step for a job whose file landed while
     * credits were short. Queued, running or terminal jobs come back unchanged with 0 charged.
     */
    const retryStart = (caller: Caller, uploadId: string, requestId: string) =>
      Effect.gen(function*() {
        const outcome = yield* Effect.gen(function*() {
          const rows = yield* sql<{ prediction_id: string; status: string; upload_status: string }>`
            SELECT p.id AS prediction_id, p.status, u.status AS upload_status
              FROM uploads u JOIN predictions p ON p.id = u.prediction_id
             WHERE u.id = ${uploadId} AND u.key_id = ${caller.keyId}
               AND p.created_at > now() - make_interval(secs => ${retentionSec})
               FOR UPDATE OF p`
          const row = rows[0]
          if (row === undefined) return yield* new NotFound({ message: `No upload ${uploadId} for this key.` })
          if (row.status !== "awaiting_upload") return { predictionId: row.prediction_id, hold: null }
          if (row.upload_status !== "received") {
            return yield* new ValidationFailed({
              message: "upload_id: the file has not landed yet; PUT it to the upload_url first."
            })
          }
          const hold = yield* reserveAndQueue(row.prediction_id, caller.accountId, requestId)
          return { predictionId: row.prediction_id, hold }
        }).pipe(sql.withTransaction)
        if (outcome.hold !== null) yield* signal.wake
        const prediction = toPrediction(yield* readPrediction(outcome.predictionId))
        if (outcome.hold !== null) {
          return { prediction, charged: PREDICTION_CREDITS, balances: outcome.hold.balancesAfter } satisfies RetryOutcome
        }
        const wallet = yield* ledger.wallet(caller.accountId)
        return {
          prediction,
          charged: 0,
          balances: { monthly: wallet.monthly, topup: wallet.topup }
        } satisfies RetryOutcome
      }).pipe(orDieOnDb, Effect.withSpan("Predictions.retryStart"))

    /** Visible only to the key that created it, and only for the retention period. */
    const get = (caller: Caller, id: string) =>
      sql`${selectPrediction}
           WHERE p.id = ${id} AND p.key_id = ${caller.keyId}
             AND p.created_at > now() - make_interval(secs => ${retentionSec})`.pipe(
        Effect.flatMap(decodePrediction),
        orDieOnDb,
        Effect.flatMap(Option.match({
          onNone: () => new NotFound({ message: `No prediction ${id} for this key.` }),
          onSome: (row) => Effect.succeed(toPrediction(row))
        }))
      )

    // ------------------------------------------------------------------------------------------
    // Used by the workers and the sweeper

    /**
     * The terminal transition, in its own transaction: the row moves only while it still meets
     * `guard`, its hold is settled (20) or refunded, and the webhook event is written alongside.
     * Returns false when another process got there first (nothing changed).
     */
    const finish = (predictionId: string, outcome: Outcome, guard: Fragment) =>
      Effect.gen(function*() {
        const succeeded = outcome.status === "succeeded"
        const result = succeeded
          ? JSON.stringify({
            band: outcome.score.band,
            hook_duration_sec: outcome.score.hookDurationSec,
            category: outcome.score.category,
            features: outcome.score.features
          })
          : null
        const durationSec = succeeded ? outcome.score.durationSec : outcome.durationSec
        const rows = yield* sql<{ hold_id: string | null; account_id: string }>`
          UPDATE predictions
             SET status = ${outcome.status},
                 result = ${result}::jsonb,
                 error_type = ${succeeded ? null : outcome.type},
                 error_message = ${succeeded ? null : outcome.message},
                 input_duration_sec = COALESCE(${durationSec}::double precision, input_duration_sec),
                 completed_at = now(), claimed_by = NULL
           WHERE id = ${predictionId} AND ${guard}
          RETURNING hold_id, account_id`
        const row = rows[0]
        if (row === undefined) return false
        if (row.hold_id !== null) {
          yield* succeeded ? ledger.settle(row.hold_id, PREDICTION_CREDITS) : ledger.refund(row.hold_id)
        }
        const prediction = toPrediction(yield* readPrediction(predictionId))
        yield* webhooks.enqueueEvent(row.account_id, succeeded ? "prediction.succeeded" : "prediction.failed", prediction)
        return true
      }).pipe(sql.withTransaction, orDieOnDb, Effect.uninterruptible)

    /** Deletes the stored file of a terminal job (idempotent; the sweeper retries leftovers). */
    const discardBlob = (predictionId: string) =>
      Effect.gen(function*() {
        const rows = yield* sql<{ id: string; blob_key: string }>`
          SELECT u.id, u.blob_key FROM uploads u JOIN predictions p ON p.id = u.prediction_id
           WHERE u.prediction_id = ${predictionId} AND u.blob_key IS NOT NULL
             AND p.status IN ('succeeded', 'failed')`
        for (const row of rows) {
          yield* blobs.remove(row.blob_key)
          yield* sql`UPDATE uploads SET blob_key = NULL WHERE id = ${row.id} AND blob_key = ${row.blob_key}`
        }
      }).pipe(orDieOnDb)

    /** A landed file the job will not score: the upload is received and the job fails, nothing reserved. */
    const failLanded = (
      upload: { readonly id: string; readonly predictionId: string },
      stored: { readonly sizeBytes: number; readonly kind: MediaKind | null; readonly blobKey: string },
      failure: { readonly type: PredictionErrorType; readonly message: string }
    ) =>
      Effect.gen(function*() {
        yield* sql`
          UPDATE uploads
             SET status = 'received', size_bytes = ${stored.sizeBytes}, media_kind = ${stored.kind}, received_at = now(),
                 blob_key = ${stored.blobKey}
           WHERE id = ${upload.id} AND status = 'receiving'`
        yield* finish(upload.predictionId, { status: "failed", ...failure, durationSec: null }, sql`status = 'awaiting_upload'`)
      }).pipe(sql.withTransaction, Effect.zipRight(discardBlob(upload.predictionId)))

    /**
     * Presigned uploads: the object trigger for one pending upload whose object exists. S3 takes
     * a presigned PUT again until the link expires, so the object is copied, checked as the PUT
     * route checks a body (sniffed, at most UPLOAD_MAX_BYTES), to the job's own key
     * `jobs/<prediction>`, which no link can write, and the uploaded object is deleted: a later PUT
     * cannot change what is scored, and the watcher deletes what it writes. A file that is not a
     * supported video, or too large, fails the job (the bucket already answered the client's PUT).
     */
    const landStoredObject = (uploadId: string) =>
      Effect.gen(function*() {
        const claimed = yield* sql<{ id: string; prediction_id: string; blob_key: string }>`
          UPDATE uploads SET status = 'receiving', receiving_started_at = now()
           WHERE id = ${uploadId} AND status = 'pending' AND blob_key IS NOT NULL
          RETURNING id, prediction_id, blob_key`
        const upload = claimed[0]
        if (upload === undefined) return
        const uploadedKey = upload.blob_key
        const size = yield* blobs.size(uploadedKey)
        if (Option.isNone(size)) return yield* releaseClaim(upload.id)
        const jobKey = jobBlobKey(upload.prediction_id)
        const copied = yield* Effect.scoped(Effect.gen(function*() {
          const checked = yield* checkedVideoBody(blobs.read(uploadedKey, config.uploadMaxBytes + 1), config.uploadMaxBytes)
          const stored = yield* blobs.put(jobKey, checked.stream)
          return { kind: checked.kind, sizeBytes: stored.sizeBytes, blobKey: jobKey }
        })).pipe(
          Effect.either,
          // The bucket failed mid-copy: the link is released and the watcher tries again.
          Effect.onExit((exit) =>
            Exit.isSuccess(exit) ? Effect.void : blobs.remove(jobKey).pipe(Effect.zipRight(releaseClaim(upload.id)), Effect.orDie))
        )
        yield* blobs.remove(uploadedKey)
        const target = { id: upload.id, predictionId: upload.prediction_id }
        if (Either.isLeft(copied)) {
          return yield* failLanded(target, { sizeBytes: size.value, kind: null, blobKey: uploadedKey }, {
            type: "unsupported_media",
            // The PUT's own 415 says to upload again; a job's error says what the file was.
            message: copied.left._tag === "UnsupportedMediaType" ? "The file is not an MP4, MOV or WebM video." : copied.left.message
          })
        }
        const landed = yield* Effect.either(land(target, copied.right, null))
        if (Either.isLeft(landed)) {
          yield* failLanded(target, copied.right, {
            type: "expired",
            message: "The clip landed while credits were short, and this account already keeps as many clips waiting for credits as allowed."
          })
        }
      }).pipe(orDieOnDb)

    return {
      createUpload,
      receiveUpload,
      retryStart,
      get,
      finish,
      discardBlob,
      landStoredObject,
      releaseClaim: (uploadId: string) => orDieOnDb(releaseClaim(uploadId)),
      readPrediction: (id: string) => orDieOnDb(readPrediction(id)),
      announceQueued: orDieOnDb(announceQueued),
      config
    } as const
  }),
  dependencies: [Ledger.Default, Webhooks.Default, BlobStore.Default, WorkSignal.Default, UploadQuotas.Default]
}) {}

