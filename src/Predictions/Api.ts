/** The clip scoring contract (link, retry start, the prediction) and the upload PUT. */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import {
  AuthorizationNotAllowedWire,
  InsufficientCreditsWire,
  PayloadTooLargeWire,
  SpendLimitReachedWire,
  TooManyPendingUploadsWire,
  UnpaidClipsLimitWire,
  UnsupportedMediaTypeWire,
  UploadAlreadyUsedWire,
  UploadExpiredWire
} from "../Errors.js"
import { acceptsIdempotencyKey, IdempotencyKeys } from "../Idempotency/Api.js"
import { predictionPrice } from "../Ledger/Prices.js"
import { SecretPathParams, StreamedBody } from "../RouteTraits.js"
import { Band, PredictionErrorType, PredictionStatus } from "./Domain.js"
import { strict, Timestamp } from "../Schemas.js"

export const PredictUpload = Schema.Struct({
  upload_id: Schema.String,
  prediction_id: Schema.String,
  upload_url: Schema.String,
  expires_at: Timestamp
}).annotate({ identifier: "PredictUpload" })
export type PredictUpload = typeof PredictUpload.Type

export { Band, PredictionErrorType, PredictionStatus }

export const SimilarHook = Schema.Struct({
  id: Schema.String,
  text: Schema.String,
  category: Schema.NullOr(Schema.String),
  score: Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 })).annotate({
    description: "How much of hook_text this hook shares, 0 to 1 (three significant digits): the share of the line's words it " +
      "holds, each word weighted by how rare it is in the catalog; 1 when it holds every word."
  })
}).annotate({ identifier: "SimilarHook", description: "A catalog hook near the clip's on-screen hook (GET /v1/hooks/{id} has the rest)." })

export const PredictionResult = Schema.Struct({
  band: Band,
  hook_duration_sec: Schema.NullOr(Schema.Finite),
  category: Schema.NullOr(Schema.Struct({ slug: Schema.String })).annotate({
    description: "The category the catalog hooks nearest to hook_text point to (docs/behaviour.md has the rule); null when they " +
      "tie or have none, or nothing was read."
  }),
  hook_text: Schema.NullOr(Schema.String).annotate({
    description: "The hook line read on screen in the opening (a caption that changes gives its parts, one per line); " +
      "null when no text was read."
  }),
  hook_text_confidence: Schema.NullOr(Schema.Finite).annotate({
    description: "How sure the reading of hook_text is, 0 to 1 (mean word confidence); null with hook_text."
  }),
  similar_hooks: Schema.Array(SimilarHook).annotate({
    description: "Up to 3 catalog hooks nearest to hook_text, highest score first; empty when nothing was read or no catalog hook " +
      "holds a word of it (other than words like \"the\" or \"you\")."
  })
}).annotate({ identifier: "PredictionResult" })
export type PredictionResult = typeof PredictionResult.Type

export const Prediction = Schema.Struct({
  object: Schema.Literal("prediction"),
  id: Schema.String,
  status: PredictionStatus,
  created_at: Timestamp,
  completed_at: Schema.NullOr(Timestamp),
  input: Schema.NullOr(Schema.Struct({ duration_sec: Schema.NullOr(Schema.Finite) })),
  result: Schema.NullOr(PredictionResult),
  error: Schema.NullOr(Schema.Struct({ type: PredictionErrorType, message: Schema.String }))
}).annotate({ identifier: "Prediction" })
export type Prediction = typeof Prediction.Type

export const RetryStart = Schema.Struct({ upload_id: Schema.String }).annotate({ identifier: "RetryStart" })

export const UploadReceipt = Schema.Struct({
  object: Schema.Literal("upload"),
  upload_id: Schema.String,
  /** The job to poll (GET /v1/predict/{id}), the same id the link request answered. */
  prediction_id: Schema.String,
  status: Schema.Literal("received")
}).annotate({ identifier: "UploadReceipt" })

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

export class PredictApi extends HttpApiGroup.make("predict")
  .add(
    HttpApiEndpoint.post("createUpload", "/predict/upload", {
      success: PredictUpload,
      error: [TooManyPendingUploadsWire, UnpaidClipsLimitWire]
    })
      .annotate(AccessRule, needs("predict:write"))
      .annotate(OpenApi.Summary, "Create an upload link")
      .annotate(
        OpenApi.Description,
        "Creates a prediction awaiting its clip and a one-time upload_url valid 15 minutes. No body. Costs 0. Needs predict:write. " +
          "429 too_many_pending_uploads when the key holds too many unused links; 429 unpaid_clips_limit when the " +
          "account keeps too many clips waiting for credits (both with Retry-After)."
      )
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey),
    HttpApiEndpoint.post("retryStart", "/predict", {
      payload: RetryStart,
      success: Prediction,
      error: [InsufficientCreditsWire, SpendLimitReachedWire]
    })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(AccessRule, needs("predict:write"))
      .annotate(OpenApi.Summary, "Retry start")
      .annotate(
        OpenApi.Description,
        `Retries the reserve for a clip that landed while credits were short: charges ${predictionPrice} if this call reserves, ` +
          "0 if the job is already queued or later. 422 if the file has not landed. Needs predict:write."
      )
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey),
    HttpApiEndpoint.get("get", "/predict/:id", { params: { id: Schema.String }, success: Prediction })
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
    HttpApiEndpoint.put("put", "/uploads/:token", {
      params: { token: Schema.String },
      success: UploadReceipt,
      error: [
        AuthorizationNotAllowedWire,
        UploadAlreadyUsedWire,
        UploadExpiredWire,
        PayloadTooLargeWire,
        UnsupportedMediaTypeWire,
        UnpaidClipsLimitWire
      ]
    })
      .annotate(OpenApi.Summary, "Upload the clip")
      .annotate(StreamedBody, true)
      .annotate(SecretPathParams, ["token"])
      // No payload is declared: the handler streams the raw body itself under its own limit, and a
      // declared body would make the framework check its Content-Type; so the request body is
      // documented here for generated clients.
      .annotate(OpenApi.Override, { requestBody: uploadRequestBody })
      .annotate(
        OpenApi.Description,
        "The one-time upload_url from Create an upload link. The raw MP4, MOV or WebM bytes as the body (at most 256 MiB), " +
          `with no Authorization header. Costs 0; ${predictionPrice} credits are reserved when the job reaches queued. ` +
          "429 unpaid_clips_limit when the wallet cannot pay and the account already keeps as many unpaid clips as allowed."
      )
  )
  .annotate(OpenApi.Title, "Upload")
{}
