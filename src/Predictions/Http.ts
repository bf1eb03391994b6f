import { Effect, Stream } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { AuthorizationNotAllowed, RequestId, ValidationFailed } from "../Errors.js"
import { idempotent } from "../Idempotency/Http.js"
import { creditHeaders } from "../Ledger/Metering.js"
import { PredictionJobs } from "./Jobs.js"
import type { UploadBody } from "./Services.js"
import { PredictionUploads } from "./Uploads.js"

export const PredictHandlers = HttpApiBuilder.group(HooklineApi, "predict", (handlers) =>
  Effect.gen(function*() {
    const uploads = yield* PredictionUploads
    const jobs = yield* PredictionJobs
    return handlers
      .handle("createUpload", () => idempotent(Effect.flatMap(CurrentCaller, uploads.createUploadLink)))
      .handle("retryStart", ({ payload }) =>
        idempotent(
          Effect.gen(function*() {
            const caller = yield* CurrentCaller
            const outcome = yield* jobs.retryStart(caller, payload.upload_id, yield* RequestId)
            yield* creditHeaders(outcome.charged, outcome.balances)
            return outcome.prediction
          }),
          payload
        ))
      .handle("get", ({ params }) => Effect.flatMap(CurrentCaller, (caller) => jobs.get(caller, params.id)))
  })
)

/**
 * What the upload PUT's headers say about its body, and the body itself, read as it arrives:
 * the endpoint declares no payload, so nothing reads or limits the body before the handler.
 */
const uploadBody = (request: HttpServerRequest.HttpServerRequest): UploadBody => {
  const declared = request.headers["content-length"]
  return {
    stream: request.stream.pipe(
      Stream.mapError(() => new ValidationFailed({ message: "The upload ended before the whole body arrived." }))
    ),
    declaredBytes: declared === undefined ? null : Number(declared),
    empty: declared === "0" || (declared === undefined && request.headers["transfer-encoding"] === undefined)
  }
}

export const UploadHandlers = HttpApiBuilder.group(HooklineApi, "upload", (handlers) =>
  Effect.gen(function*() {
    const uploads = yield* PredictionUploads
    return handlers.handle("put", ({ params, request }) =>
      Effect.gen(function*() {
        if (request.headers["authorization"] !== undefined) {
          return yield* new AuthorizationNotAllowed({
            message: "The upload PUT must not carry an Authorization header: the upload_url itself is the credential."
          })
        }
        return yield* uploads.receive(params.token, uploadBody(request), yield* RequestId)
      }))
  })
)
