/**
 * What the jobs service (Jobs.ts) and the uploads service (Uploads.ts) offer their callers: the
 * API's handlers, the workers, the sweeper, and each other. How they do it stays in their files.
 */
import type { Effect, Option, Result, Stream } from "effect"
import type { Caller } from "../Auth/Api.js"
import type {
  InsufficientCredits,
  NotFound,
  PayloadTooLarge,
  ServiceUnavailable,
  SpendLimitReached,
  TooManyPendingUploads,
  UnpaidClipsLimit,
  UnsupportedMediaType,
  UploadAlreadyUsed,
  UploadExpired,
  ValidationFailed
} from "../Errors.js"
import type { Hold } from "../Ledger/Ledger.js"
import type { Prediction, PredictUpload, UploadReceipt } from "./Api.js"
import type { Outcome, RetryOutcome } from "./Outcome.js"
import type { ClaimedJob, FinishGuard } from "./Rows.js"

/** A landed job the consume step could take: its account, and its credits reserved or why not (nothing changed). */
export interface LandedJob {
  readonly accountId: string
  readonly reserved: Result.Result<Hold, InsufficientCredits | SpendLimitReached>
}

/** The jobs service: a job from landed to terminal, the workers' claims, retry start and get, and the sweeps. */
export interface PredictionJobsService {
  /**
   * The consume step of a landing, inside its transaction: None when the job may not be queued
   * (its key was revoked, its account suspended, or it moved on); else its account and whether
   * the credits were reserved (the job queued) or not (the wallet was short).
   */
  readonly queueLanded: (predictionId: string, requestId: string | null) => Effect.Effect<Option.Option<LandedJob>>
  /**
   * The terminal transition, in its own transaction: the job moves only while it still meets
   * `guard`, its hold is settled or refunded, and the webhook event is written alongside.
   * False when another process got there first (nothing changed).
   */
  readonly finish: (predictionId: string, outcome: Outcome, guard: FinishGuard) => Effect.Effect<boolean>
  /** Deletes the stored file of a terminal job (idempotent; the sweeper retries leftovers). */
  readonly discardBlob: (predictionId: string) => Effect.Effect<void>
  /** `finish`, and when this call moved the job, `discardBlob`. */
  readonly finishAndDiscard: (predictionId: string, outcome: Outcome, guard: FinishGuard) => Effect.Effect<boolean>
  /**
   * Retry start (POST /v1/predict): reserves and queues a job whose file landed while credits
   * were short; queued, running or terminal jobs come back unchanged with 0 charged.
   */
  readonly retryStart: (
    caller: Caller,
    uploadId: string,
    requestId: string
  ) => Effect.Effect<RetryOutcome, NotFound | ValidationFailed | InsufficientCredits | SpendLimitReached>
  /** The prediction, visible only to the key that created it and only for the retention period. */
  readonly get: (caller: Caller, id: string) => Effect.Effect<Prediction, NotFound>
  /** A worker claims the next queued job, fairly across accounts; None when the queue is empty. */
  readonly claimNextJob: (workerId: string) => Effect.Effect<Option.Option<ClaimedJob>>
  /** Keeps the worker's claim; false as soon as the job is no longer this worker's. */
  readonly heartbeat: (id: string, workerId: string) => Effect.Effect<boolean>
  /** Shutdown: the job goes straight back to the queue, this attempt not counted. */
  readonly handBack: (id: string, workerId: string) => Effect.Effect<void>
  /** Running jobs whose heartbeat is older than HEARTBEAT_TIMEOUT: queued again, or failed (refunded). */
  readonly requeueStalled: Effect.Effect<void>
  /** Jobs queued longer than QUEUE_TIMEOUT: failed / expired (refunded). */
  readonly expireQueued: Effect.Effect<void>
  /** Landed files still waiting for credits UNPAID_CLIP_RETENTION after they landed: failed / expired. */
  readonly expireUnpaid: Effect.Effect<void>
  /** Stored files of terminal jobs that a crash left behind. */
  readonly deleteLeftoverFiles: Effect.Effect<void>
}

/** The PUT's body, as Http.ts hands it over. */
export interface UploadBody {
  /** The bytes; fails with ValidationFailed when the client goes away mid-body. */
  readonly stream: Stream.Stream<Uint8Array, ValidationFailed>
  /** Content-Length, when the request declared one. */
  readonly declaredBytes: number | null
  /** The request declared no body at all (Content-Length 0, or neither it nor chunked encoding). */
  readonly empty: boolean
}

/** The uploads service: a link made, the file it takes (the PUT, or the bucket's object), and its landing. */
export interface PredictionUploadsService {
  /** A link and its job (awaiting_upload); 503 while the bucket's last access check failed. */
  readonly createUploadLink: (caller: Caller) => Effect.Effect<PredictUpload, ServiceUnavailable | TooManyPendingUploads | UnpaidClipsLimit>
  /**
   * The upload PUT: the link is claimed before a byte is stored (of two PUTs at once exactly one
   * streams), the body checked and stored as it streams, and the file landed.
   */
  readonly receive: (
    token: string,
    body: UploadBody,
    requestId: string | null
  ) => Effect.Effect<
    typeof UploadReceipt.Type,
    NotFound | UploadAlreadyUsed | UploadExpired | PayloadTooLarge | UnsupportedMediaType | UnpaidClipsLimit | ValidationFailed
  >
  /** Presigned uploads: lands the object the bucket received for a pending link (the watcher's and the link sweep's). */
  readonly landStoredObject: (uploadId: string) => Effect.Effect<void>
}
