/**
 * The prediction and upload rows as read from the database, a job as a worker claims it, the
 * terminal transition's request, and the Prediction they make.
 */
import { Clock, Duration, Effect, Option, Schema } from "effect"
import { toNullableTimestamp, toTimestamp } from "../Schemas.js"
import { type Prediction, type PredictionResult, SimilarHook } from "./Api.js"
import { Band, PredictionErrorType, PredictionStatus } from "./Domain.js"
import type { ClipScore } from "./Scorer.js"

/** A stored similar hook; those stored before hooks had a score lack it (answered as 0: unknown). */
const StoredSimilarHook = Schema.Struct({ ...SimilarHook.fields, score: Schema.optionalKey(Schema.Number) })

/** The stored result; results stored before hooks were read lack the hook fields (read as nothing read). */
export const StoredResult = Schema.Struct({
  band: Band,
  hook_duration_sec: Schema.NullOr(Schema.Number),
  category: Schema.NullOr(Schema.Struct({ slug: Schema.String })),
  hook_text: Schema.optionalKey(Schema.NullOr(Schema.String)),
  hook_text_confidence: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  similar_hooks: Schema.optionalKey(Schema.Array(StoredSimilarHook))
})

/** The hook fields of a stored result, from a score (Jobs.ts writes them with the band). */
export const storedHookFields = (score: ClipScore) => ({
  hook_text: score.hook?.text ?? null,
  hook_text_confidence: score.hook?.confidence ?? null,
  similar_hooks: score.hook?.similar ?? []
})

const toResult = (result: typeof StoredResult.Type): PredictionResult => ({
  band: result.band,
  hook_duration_sec: result.hook_duration_sec,
  category: result.category,
  hook_text: result.hook_text ?? null,
  hook_text_confidence: result.hook_text_confidence ?? null,
  similar_hooks: (result.similar_hooks ?? []).map((hook) => ({ ...hook, score: hook.score ?? 0 }))
})

export const PredictionRow = Schema.Struct({
  id: Schema.String,
  account_id: Schema.String,
  status: PredictionStatus,
  hold_id: Schema.NullOr(Schema.String),
  input_duration_sec: Schema.NullOr(Schema.Number),
  result: Schema.NullOr(StoredResult),
  error_type: Schema.NullOr(PredictionErrorType),
  error_message: Schema.NullOr(Schema.String),
  created_at: Schema.Date,
  completed_at: Schema.NullOr(Schema.Date),
  upload_id: Schema.String,
  upload_status: Schema.Literals(["pending", "receiving", "received", "expired"])
})
export type PredictionRow = typeof PredictionRow.Type

export const UploadRow = Schema.Struct({
  id: Schema.String,
  prediction_id: Schema.String,
  account_id: Schema.String,
  status: Schema.Literals(["pending", "receiving", "received", "expired"]),
  blob_key: Schema.NullOr(Schema.String),
  expired: Schema.Boolean
})
export type UploadRow = typeof UploadRow.Type

/** A job a worker has claimed, with what it needs to score it. */
export const ClaimedJob = Schema.Struct({
  id: Schema.String,
  attempts: Schema.Number,
  blob_key: Schema.NullOr(Schema.String),
  /** W3C traceparent of the request that queued the job. */
  trace_parent: Schema.NullOr(Schema.String)
})
export type ClaimedJob = typeof ClaimedJob.Type

/** Which state a terminal transition may leave; it changes nothing when the row has moved on. */
export const FinishGuard = Schema.Union([
  /** The running job this worker still holds. */
  Schema.TaggedStruct("HeldBy", { workerId: Schema.String }),
  /** No file yet (link expired) or a landed file that will not be scored. */
  Schema.TaggedStruct("AwaitingUpload", {}),
  /** Running, heart-beat last before `heartbeatBefore`, claimed `maxAttempts` times already. */
  Schema.TaggedStruct("StalledOut", { heartbeatBefore: Schema.Date, maxAttempts: Schema.Number }),
  /** Queued since before `queuedBefore`. */
  Schema.TaggedStruct("QueuedBefore", { queuedBefore: Schema.Date }),
  /** Landed unpaid before `receivedBefore`. */
  Schema.TaggedStruct("UnpaidBefore", { receivedBefore: Schema.Date })
])
export type FinishGuard = typeof FinishGuard.Type

/** A terminal transition (JobsRepo.finishJob): the outcome, and the guard the row must still meet. */
export const Finish = Schema.Struct({
  id: Schema.String,
  status: Schema.Literals(["succeeded", "failed"]),
  result: Schema.NullOr(Schema.String),
  errorType: Schema.NullOr(Schema.String),
  errorMessage: Schema.NullOr(Schema.String),
  durationSec: Schema.NullOr(Schema.Number),
  now: Schema.Date,
  guard: FinishGuard
})
export type Finish = typeof Finish.Type

/** The contract's Prediction: `input` appears once the file has landed. */
export const toPrediction = (row: PredictionRow): Prediction => ({
  object: "prediction",
  id: row.id,
  status: row.status,
  created_at: toTimestamp(row.created_at),
  completed_at: toNullableTimestamp(row.completed_at),
  input: row.upload_status === "received" ? { duration_sec: row.input_duration_sec } : null,
  result: row.result === null ? null : toResult(row.result),
  error: row.error_type === null ? null : { type: row.error_type, message: row.error_message ?? "" }
})

/** Whether a conditional statement moved a row. */
export const moved = <A, E>(found: Effect.Effect<Option.Option<A>, E>) => Effect.map(found, Option.isSome)

/** The instant `duration` before now, by the same Clock. */
export const dateBefore = (duration: Duration.Duration) =>
  Effect.map(Clock.currentTimeMillis, (millis) => new Date(millis - Duration.toMillis(duration)))
