/**
 * The prediction domain: where a job is in its life, the band a clip scores, why a job failed.
 * Services and repositories use these; the wire contract (Api.ts) reuses the same literals.
 */
import { Schema } from "effect"

export const PredictionStatus = Schema.Literals(["awaiting_upload", "queued", "running", "succeeded", "failed"])
export type PredictionStatus = typeof PredictionStatus.Type

export const Band = Schema.Literals(["low", "medium", "high"])
export type Band = typeof Band.Type

export const PredictionErrorType = Schema.Literals([
  "upload_expired",
  "expired",
  "unsupported_media",
  "clip_too_long",
  "analysis_failed"
])
export type PredictionErrorType = typeof PredictionErrorType.Type
