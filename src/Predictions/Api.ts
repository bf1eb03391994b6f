/** The clip scoring contract (spec 2.7, 2.8, 3.1, 4.7–4.10) and the upload PUT. */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import {
  AuthorizationNotAllowedWire,
  InsufficientCreditsWire,
  PayloadTooLargeWire,
  TooManyPendingUploadsWire,
  UnpaidClipsLimitWire,
  UnsupportedMediaTypeWire,
  UploadAlreadyUsedWire,
  UploadExpiredWire
} from "../Errors.js"
import { acceptsIdempotencyKey } from "../Idempotency/Api.js"
import { Band, PredictionErrorType, PredictionStatus } from "./Domain.js"
import { strict, Timestamp } from "../Schemas.js"

export const PredictUpload = Schema.Struct({
  upload_id: Schema.String,
  prediction_id: Schema.String,
  upload_url: Schema.String,
  expires_at: Timestamp
}).annotations({ identifier: "PredictUpload" })
export type PredictUpload = typeof PredictUpload.Type

export { Band, PredictionErrorType, PredictionStatus }

export const PredictionResult = Schema.Struct({
  band: Band,
  hook_duration_sec: Schema.NullOr(Schema.Number),
  category: Schema.NullOr(Schema.Struct({ slug: Schema.String }))
}).annotations({ identifier: "PredictionResult" })
export type PredictionResult = typeof PredictionResult.Type

export const Prediction = Schema.Struct({
  object: Schema.Literal("prediction"),
  id: Schema.String,
  status: PredictionStatus,
  created_at: Timestamp,
  completed_at: Schema.NullOr(Timestamp),
  input: Schema.NullOr(Schema.Struct({ duration_sec: Schema.NullOr(Schema.Number) })),
  result: Schema.NullOr(PredictionResult),
  error: Schema.NullOr(Schema.Struct({ type: PredictionErrorType, message: Schema.String }))
}).annotations({ identifier: "Prediction" })
export type Prediction = typeof Prediction.Type

export const RetryStart = Schema.Struct({ upload_id: Schema.String }).annotations({
  ...strict,
  identifier: "RetryStart"
})

export const UploadReceipt = Schema.Struct({
  object: Schema.Literal("upload"),
  upload_id: Schema.String,
  status: Schema.Literal("received")
}).annotations({ identifier: "UploadReceipt" })

/** The upload PUT's body as OpenAPI documents it: the raw file, under any of these types. */
const uploadRequestBody = {
  required: true,
  description: "The clip's raw bytes, not a multipart form: `curl -X PUT --data-binary @clip.mp4 <upload_url>`. " +
    "The kind of video is recognised from the bytes; the Content-Type is not checked.",
  content: Object.fromEntries(
    ["application/octet-stream", "video/mp4", "video/quicktime", "video/webm"].map((type) => [
      type,
      { schema: { type: "string", format: "binary" } }
    ])
  )
}

const predictionIdParam = HttpApiSchema.param("id", Schema.String)
const uploadTokenParam = HttpApiSchema.param("token", Schema.String)

export class PredictApi extends HttpApiGroup.make("predict")
  .add(
    HttpApiEndpoint.post("createUpload", "/predict/upload")
      .addSuccess(PredictUpload)
      .addError(TooManyPendingUploadsWire)
      .addError(UnpaidClipsLimitWire)
      .annotate(AccessRule, needs("predict:write"))
      .annotate(OpenApi.Summary, "Create an upload link")
      .annotate(
        OpenApi.Description,
        "Creates a prediction awaiting its clip and a one-time upload_url valid 15 minutes. No body. Costs 0. Needs predict:write. " +
          "429 too_many_pending_uploads when the key holds too many unused links; 429 unpaid_clips_limit when the " +
          "account keeps too many clips waiting for credits (both with Retry-After)."
      )
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.post("retryStart", "/predict")
      .setPayload(RetryStart)
      .addSuccess(Prediction)
      .addError(InsufficientCreditsWire)
      .annotate(AccessRule, needs("predict:write"))
      .annotate(OpenApi.Summary, "Retry start")
      .annotate(
        OpenApi.Description,
        "Retries the reserve for a clip that landed while credits were short: charges 20 if this call reserves, " +
          "0 if the job is already queued or later. 422 if the file has not landed. Needs predict:write."
      )
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.get("get")`/predict/${predictionIdParam}`
      .addSuccess(Prediction)
      .annotate(AccessRule, needs("predict:write", true))
      .annotate(OpenApi.Summary, "Get a prediction")
      .annotate(
        OpenApi.Description,
        "Visible only to the key that created it, for 24 hours. Costs 0. Stays available after plan loss. Needs predict:write."
      )
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Predict")
{}

export class UploadApi extends HttpApiGroup.make("upload")
  .add(
    HttpApiEndpoint.put("put")`/uploads/${uploadTokenParam}`
      .addSuccess(UploadReceipt)
      .addError(AuthorizationNotAllowedWire)
      .addError(UploadAlreadyUsedWire)
      .addError(UploadExpiredWire)
      .addError(PayloadTooLargeWire)
      .addError(UnsupportedMediaTypeWire)
      .addError(UnpaidClipsLimitWire)
      .annotate(OpenApi.Summary, "Upload the clip")
      // The handler streams the body itself (a declared payload would be read whole), so the
      // request body is documented here for generated clients.
      .annotate(OpenApi.Override, { requestBody: uploadRequestBody })
      .annotate(
        OpenApi.Description,
        "The one-time upload_url from Create an upload link. The raw MP4, MOV or WebM bytes as the body (at most 256 MiB), " +
          "with no Authorization header. Costs 0; 20 credits are reserved when the job reaches queued. " +
          "429 unpaid_clips_limit when the wallet cannot pay and the account already keeps as many unpaid clips as allowed."
      )
  )
  .annotate(OpenApi.Title, "Upload")
{}
