/**
 * The uploads service: an upload link is made (with its job, awaiting_upload), takes one file
 * (the PUT, or in presigned mode the object the bucket received), and lands it: in one
 * transaction the upload becomes received and the jobs service queues the job with its credits
 * reserved, or, when the wallet is short, the job stays awaiting_upload with its file kept
 * (retry start picks it up). The HTTP side (headers, the request body) is Http.ts's: this
 * service takes the body as a stream and what the headers declared as arguments.
 */
import { Context, Duration, Effect, Exit, Layer, Option, Result } from "effect"
import { SqlClient } from "effect/sql"
import type { Caller } from "../Auth/Api.js"
import { publicBaseUrl, ServerConfig } from "../Config.js"
import { NotFound, ServiceUnavailable, UploadAlreadyUsed, UploadExpired } from "../Errors.js"
import { newId, randomToken, sha256Hex } from "../Ids.js"
import { answerInTransaction } from "../Idempotency/Headers.js"
import { traced } from "../Observability/Tracing.js"
import { toTimestamp } from "../Schemas.js"
import { orDieOnDb } from "../Sql.js"
import type { PredictionErrorType, PredictUpload, UploadReceipt } from "./Api.js"
import { BlobStore } from "./BlobStore.js"
import { BucketAccess } from "./BucketCheck.js"
import { PredictionsConfig } from "./Config.js"
import { predictionPrice } from "../Ledger/Prices.js"
import { PredictionJobs } from "./Jobs.js"
import { failedWith } from "./Outcome.js"
import { checkedVideoBody, type MediaKind, tooLarge, unsupportedMedia } from "./MediaCheck.js"
import { UploadQuotas } from "./Quotas.js"
import { currentDate } from "../Repository.js"
import type { UploadRow } from "./Rows.js"
import type { PredictionUploadsService, UploadBody } from "./Services.js"
import { UploadsRepo } from "./UploadsRepo.js"
import { WorkSignal } from "./WorkSignal.js"

/** Presigned mode: where a landed clip is copied, out of reach of its upload link. */
export const jobBlobKey = (predictionId: string) => `jobs/${predictionId}`

/** Upload tokens: 24 random bytes (192 bits), URL-safe base64. */
const tokenPattern = /^[A-Za-z0-9_-]{32}$/

interface Upload {
  readonly id: string
  readonly predictionId: string
}

interface Stored {
  readonly sizeBytes: number
  readonly kind: MediaKind | null
  readonly blobKey: string
}

const alreadyUsed = () => new UploadAlreadyUsed({ message: "This upload link was already used." })

/** 409 used, 410 expired; None when the link can take a file. */
const refusal = (upload: UploadRow): Option.Option<UploadAlreadyUsed | UploadExpired> =>
  upload.status === "receiving" || upload.status === "received"
    ? Option.some(alreadyUsed())
    : upload.status === "expired" || upload.expired
    ? Option.some(new UploadExpired({ message: "This upload link has expired; create a new one." }))
    : Option.none()

/** What the uploads service is made of; each part below takes it. */
const dependencies = Effect.gen(function*() {
  return {
    sql: yield* SqlClient.SqlClient,
    repo: yield* UploadsRepo,
    jobs: yield* PredictionJobs,
    blobs: yield* BlobStore,
    // Absent where a test builds the uploads over a store of its own: nothing is checked then.
    access: yield* Effect.serviceOption(BucketAccess),
    quotas: yield* UploadQuotas,
    signal: yield* WorkSignal,
    config: yield* PredictionsConfig,
    server: yield* ServerConfig
  } as const
})
type Dependencies = Effect.Success<typeof dependencies>

/** A link made, with its job awaiting_upload. */
const links = ({ access, blobs, config, quotas, repo, server, sql }: Dependencies) => {
  /** While the bucket's last access check failed (BucketCheck.ts), a link would only expire unused: 503 instead. */
  const storeUsable = Option.match(access, {
    onNone: () => Effect.void,
    onSome: (bucket) =>
      Effect.suspend(() =>
        bucket.problem() === null
          ? Effect.void
          : Effect.fail(new ServiceUnavailable({ message: "Clip storage is not available right now; no upload link was made. Retry later." }))
      )
  })

  const createUploadLink = (caller: Caller) =>
    Effect.gen(function*() {
      yield* storeUsable
      const predictionId = newId("pred")
      const uploadId = newId("upl")
      const token = randomToken(24)
      const blobKey = `uploads/${uploadId}`
      const now = yield* currentDate
      const expiresAt = new Date(now.getTime() + Duration.toMillis(config.uploadLinkTtl))
      const uploadUrl = Option.match(blobs.presignedPut, {
        onNone: () => `${publicBaseUrl(server)}/uploads/${token}`,
        onSome: (presign) => presign(blobKey, config.uploadLinkTtl)
      })
      const link: PredictUpload = {
        upload_id: uploadId,
        prediction_id: predictionId,
        upload_url: uploadUrl,
        expires_at: toTimestamp(expiresAt)
      }
      // The link's answer is stored under the request's Idempotency-Key in the link's own transaction.
      return yield* quotas.admitLink(caller.accountId, caller.keyId).pipe(
        Effect.andThen(repo.createUploadLink({
          predictionId,
          uploadId,
          accountId: caller.accountId,
          keyId: caller.keyId,
          tokenHash: sha256Hex(token),
          blobKey,
          now,
          expiresAt
        })),
        Effect.andThen(answerInTransaction(link)),
        sql.withTransaction
      )
    }).pipe(orDieOnDb, traced("Predictions.createUpload"))

  return { createUploadLink }
}

/** A file landed: queued with its credits reserved, kept unpaid, or (never scored) failed. */
const landing = ({ jobs, quotas, repo, signal, sql }: Dependencies) => {
  /**
   * The object trigger: the file of a `receiving` upload is complete. In one transaction the
   * upload becomes received and the job is queued with its credits reserved, or, when the
   * wallet is short, stays awaiting_upload with its file kept (within the account's bound of
   * unpaid clips; over it the landing rolls back and fails with UnpaidClipsLimit).
   */
  const land = (upload: Upload, stored: Stored, requestId: string | null) =>
    Effect.gen(function*() {
      const queued = yield* Effect.gen(function*() {
        const landed = yield* repo.landUpload({ id: upload.id, ...stored, now: yield* currentDate })
        if (!landed) return yield* Effect.die(new Error(`Upload ${upload.id} was released while its file landed`))
        const consumed = yield* jobs.queueLanded(upload.predictionId, requestId)
        if (Option.isNone(consumed)) return false
        if (Result.isFailure(consumed.value.reserved)) {
          yield* quotas.checkLandedUnpaid(consumed.value.accountId)
          yield* Effect.logInfo("clip landed while credits were short; job stays awaiting_upload").pipe(
            Effect.annotateLogs({ prediction_id: upload.predictionId })
          )
        }
        return Result.isSuccess(consumed.value.reserved)
      }).pipe(sql.withTransaction)
      if (queued) yield* signal.wake
    }).pipe(Effect.uninterruptible)

  /** A landed file the job will not score: the upload is received and the job fails, nothing reserved. */
  const failLanded = (upload: Upload, stored: Stored, type: PredictionErrorType, message: string) =>
    Effect.gen(function*() {
      yield* repo.landUpload({ id: upload.id, ...stored, now: yield* currentDate })
      yield* jobs.finish(upload.predictionId, failedWith(type, message), { _tag: "AwaitingUpload" })
    }).pipe(sql.withTransaction, orDieOnDb, Effect.andThen(jobs.discardBlob(upload.predictionId)))

  return { land, failLanded }
}

/** The upload PUT. */
const puts = ({ blobs, config, quotas, repo }: Dependencies, { land }: ReturnType<typeof landing>) => {
  /** The link of `token`, if it may take a file: 404 unknown, 409 used, 410 expired. */
  const openLink = (token: string) =>
    Effect.gen(function*() {
      const notFound = new NotFound({ message: "No such upload link." })
      if (!tokenPattern.test(token)) return yield* notFound
      const found = yield* repo.findByToken({ tokenHash: sha256Hex(token), now: yield* currentDate })
      if (Option.isNone(found)) return yield* notFound
      const refused = refusal(found.value)
      if (Option.isSome(refused)) return yield* refused.value
      return found.value
    })

  /** pending → receiving; a PUT that lost the race learns why (used, or expired a moment ago). */
  const claim = (token: string) =>
    Effect.gen(function*() {
      const tokenHash = sha256Hex(token)
      if (yield* repo.claimByToken({ tokenHash, now: yield* currentDate })) return
      const now = yield* repo.findByToken({ tokenHash, now: yield* currentDate })
      return yield* Option.getOrElse(Option.flatMap(now, refusal), alreadyUsed)
    })

  /**
   * The upload PUT. The link is claimed (pending → receiving) before a byte is stored, so of
   * two PUTs at once exactly one streams; a PUT that fails (wrong type, too large, client gone)
   * releases the link again. The body is checked and stored as it streams.
   */
  const receive = (token: string, body: UploadBody, requestId: string | null) =>
    Effect.gen(function*() {
      const link = yield* openLink(token)
      if (body.declaredBytes !== null && body.declaredBytes > config.uploadMaxBytes) return yield* tooLarge(config.uploadMaxBytes)
      if (body.empty) return yield* unsupportedMedia()
      yield* quotas.admitPut(link.account_id, body.declaredBytes ?? 0, predictionPrice)
      yield* claim(token)
      const upload = { id: link.id, predictionId: link.prediction_id }
      const blobKey = link.blob_key ?? `uploads/${upload.id}`
      const stored = yield* Effect.scoped(Effect.gen(function*() {
        const checked = yield* checkedVideoBody(body.stream, config.uploadMaxBytes)
        const blob = yield* blobs.put(blobKey, checked.stream)
        return { kind: checked.kind, sizeBytes: blob.sizeBytes, blobKey }
      })).pipe(
        Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : repo.releaseClaim(upload.id))
      )
      yield* land(upload, stored, requestId).pipe(
        // Over the unpaid bound: the file goes and the link can take it again once credits arrive.
        Effect.tapError(() => blobs.remove(blobKey).pipe(Effect.andThen(repo.releaseClaim(upload.id))))
      )
      return { object: "upload", upload_id: upload.id, prediction_id: upload.predictionId, status: "received" } satisfies typeof UploadReceipt.Type
    }).pipe(orDieOnDb, traced("Predictions.receiveUpload"))

  return { receive }
}

/** Presigned uploads: the object the bucket received, landed by the watcher. */
const presignedObjects = ({ blobs, config, repo }: Dependencies, { failLanded, land }: ReturnType<typeof landing>) => {
  /** Copies a presigned upload's object to the job's own key, checked as the PUT route checks a body. */
  const copyToJob = (uploadedKey: string, jobKey: string, uploadId: string) =>
    Effect.scoped(Effect.gen(function*() {
      const checked = yield* checkedVideoBody(blobs.read(uploadedKey, config.uploadMaxBytes + 1), config.uploadMaxBytes)
      const stored = yield* blobs.put(jobKey, checked.stream)
      return { kind: checked.kind, sizeBytes: stored.sizeBytes, blobKey: jobKey }
    })).pipe(
      Effect.result,
      // The bucket failed mid-copy: the link is released and the watcher tries again.
      Effect.onExit((exit) =>
        Exit.isSuccess(exit) ? Effect.void : blobs.remove(jobKey).pipe(Effect.andThen(repo.releaseClaim(uploadId))))
    )

  /**
   * Presigned uploads: the object trigger for one pending upload whose object exists. S3 takes
   * a presigned PUT again until the link expires, so the object is copied, checked (sniffed, at
   * most UPLOAD_MAX_BYTES), to the job's own key `jobs/<prediction>`, which no link can write,
   * and the uploaded object is deleted: a later PUT cannot change what is scored. A file that
   * is not a supported video, or too large, fails the job (the bucket already answered the PUT).
   */
  const landStoredObject = (uploadId: string) =>
    Effect.gen(function*() {
      const claimed = yield* repo.claimStoredObject({ id: uploadId, now: yield* currentDate })
      if (Option.isNone(claimed)) return
      const { blob_key: uploadedKey, id, prediction_id } = claimed.value
      const size = yield* blobs.size(uploadedKey)
      if (Option.isNone(size)) return yield* repo.releaseClaim(id)
      const copied = yield* copyToJob(uploadedKey, jobBlobKey(prediction_id), id)
      yield* blobs.remove(uploadedKey)
      const upload = { id, predictionId: prediction_id }
      if (Result.isFailure(copied)) {
        // The PUT's own 415 says to upload again; a job's error says what the file was.
        const message = copied.failure._tag === "UnsupportedMediaType" ? "The file is not an MP4, MOV or WebM video." : copied.failure.message
        return yield* failLanded(upload, { sizeBytes: size.value, kind: null, blobKey: uploadedKey }, "unsupported_media", message)
      }
      const landed = yield* Effect.result(land(upload, copied.success, null))
      if (Result.isFailure(landed)) {
        yield* failLanded(upload, copied.success, "expired",
          "The clip landed while credits were short, and this account already keeps as many clips waiting for credits as allowed.")
      }
    }).pipe(orDieOnDb)

  return { landStoredObject }
}

const make = Effect.gen(function*() {
  const deps = yield* dependencies
  const landed = landing(deps)
  return PredictionUploads.of({
    ...links(deps),
    ...puts(deps, landed),
    ...presignedObjects(deps, landed)
  })
})

export class PredictionUploads extends Context.Service<PredictionUploads, PredictionUploadsService>()("hookline/PredictionUploads") {
  static readonly layerWithoutDependencies = Layer.effect(PredictionUploads, make)
  static readonly layer = PredictionUploads.layerWithoutDependencies.pipe(
    Layer.provide([UploadsRepo.layer, PredictionJobs.layer, BlobStore.layer, UploadQuotas.layer, WorkSignal.layer])
  )
}
