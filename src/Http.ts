/**
 * Server wiring: request ids, the error envelope for every non-2xx answer (framework ones
 * included), body limits, /openapi.json, /docs and the handlers of every group.
 */
import {
  HttpApiBuilder,
  HttpApiError,
  HttpApp,
  HttpMiddleware,
  HttpServerError,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { Cause, Effect, Layer, Option } from "effect"
import { AdminHandlers } from "./Admin/Http.js"
import { HooklineApi } from "./Api.js"
import { AuthenticationLive } from "./Auth/Http.js"
import { ServerConfig } from "./Config.js"
import { InternalError, NotFound, PayloadTooLarge, RequestId, ValidationFailed } from "./Errors.js"
import { HooksHandlers } from "./Hooks/Http.js"
import { newId } from "./Ids.js"
import { observeRequests } from "./Observability/Requests.js"
import { untracedPaths } from "./Observability/Routes.js"
import { WalletHandlers } from "./Ledger/Http.js"
import { PredictHandlers, UploadHandlers } from "./Predictions/Http.js"
import { DocsLive } from "./System/Docs.js"
import { SystemHandlers } from "./System/Http.js"
import { noRouteMessage } from "./System/RouteHints.js"
import { HeaderLimitConfig, headerLimitMiddleware, isNulCharacterRefusal, nulCharacterRefused, refuseControlCharactersInPath } from "./System/InputGuards.js"
import { shutdownGateMiddleware } from "./System/Shutdown.js"
import { WebhooksHandlers } from "./Webhooks/Http.js"

/** Routes whose bodies are streamed and bounded by their own limits, not the JSON limit. */
const streamedBodyRoutes = [/^\/uploads\//, /^\/admin\/catalog\/hooks\/?$/]

/** One short sentence naming the field and the rule, from a decode failure's issues. */
export const describeDecodeError = (error: HttpApiError.HttpApiDecodeError): string => {
  const issue = error.issues[0]
  if (issue === undefined) return "The request is not valid."
  const field = issue.path.length === 0 ? "request" : issue.path.map(String).join(".")
  const rule = issue.message
    .replace(/^Expected (.*), actual (.*)$/s, "must be $1, got $2")
    .replace(/^is unexpected, expected: .*$/s, "is not an allowed property")
  return `${field}: ${rule}${error.issues.length > 1 ? ` (and ${error.issues.length - 1} more)` : ""}`
}

const pathOf = (request: HttpServerRequest.HttpServerRequest) => {
  const query = request.url.indexOf("?")
  return query === -1 ? request.url : request.url.slice(0, query)
}

type ApiLevelError = ValidationFailed | NotFound | PayloadTooLarge | InternalError

/**
 * The API-level middleware: runs inside the error encoder, so what it fails with is written as
 * the envelope. It bounds JSON bodies, and maps the framework's own failures (no route, bad JSON,
 * decode failures, defects) to the contract's errors.
 */
export const ErrorEnvelopeLive = HttpApiBuilder.middleware(
  HooklineApi,
  Effect.gen(function*() {
    const { maxJsonBodyBytes } = yield* ServerConfig
    const tooLarge = new PayloadTooLarge({ message: `The request body is larger than ${maxJsonBodyBytes} bytes.` })

    const checkBodySize = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (streamedBodyRoutes.some((route) => route.test(pathOf(request)))) return
      const declared = request.headers["content-length"]
      if (declared !== undefined) {
        if (Number(declared) > maxJsonBodyBytes) return yield* tooLarge
      } else if (request.headers["transfer-encoding"] !== undefined) {
        // A chunked body has no declared size: read it (cached for the decoder) and measure it.
        const text = yield* Effect.orElseSucceed(request.text, () => "")
        if (Buffer.byteLength(text) > maxJsonBodyBytes) return yield* tooLarge
      }
    })

    return (app: HttpApp.Default): HttpApp.Default<ApiLevelError> =>
      checkBodySize.pipe(Effect.zipRight(refuseControlCharactersInPath), Effect.zipRight(app)).pipe(
        Effect.catchAllCause((cause): Effect.Effect<never, ApiLevelError | PayloadTooLarge> => {
          const failure = Cause.failureOption(cause)
          if (Option.isSome(failure)) {
            const error: unknown = failure.value
            if (error instanceof HttpApiError.HttpApiDecodeError) {
              return Effect.fail(new ValidationFailed({ message: describeDecodeError(error) }))
            }
            if (error instanceof HttpServerError.RouteNotFound) {
              return Effect.fail(new NotFound({ message: noRouteMessage(error.request.method, error.request.url) }))
            }
            return Effect.failCause(cause)
          }
          const defect = Cause.dieOption(cause)
          if (Option.isSome(defect)) {
            const value: unknown = defect.value
            if (value instanceof HttpServerError.RequestError && value.reason === "Decode") {
              return Effect.fail(new ValidationFailed({ message: "request: the body is not valid JSON" }))
            }
            if (isNulCharacterRefusal(value)) return Effect.fail(nulCharacterRefused)
            return Effect.logError("request failed with a defect", cause).pipe(
              Effect.zipRight(Effect.fail(new InternalError({ message: "Internal server error." })))
            )
          }
          return Effect.failCause(cause)
        })
      )
  })
)

/**
 * Outermost middleware: a request id for every request, echoed as X-Request-Id and put on every
 * log line of the request. The access log, metrics and span attributes are observeRequests'.
 */
export const requestIdMiddleware = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const incoming = request.headers["x-request-id"]
    const requestId = incoming !== undefined && /^[A-Za-z0-9_.:-]{1,128}$/.test(incoming) ? incoming : newId("req")
    yield* HttpApp.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "x-request-id", requestId))
    )
    return yield* observeRequests(app).pipe(
      Effect.provideService(RequestId, requestId),
      Effect.annotateLogs("request_id", requestId)
    )
  })
)

export const ApiLive = HttpApiBuilder.api(HooklineApi).pipe(
  Layer.provide([
    WalletHandlers,
    HooksHandlers,
    PredictHandlers,
    UploadHandlers,
    WebhooksHandlers,
    AdminHandlers,
    SystemHandlers
  ]),
  Layer.provide(AuthenticationLive)
)

/** Everything the HTTP server serves, before a server is attached. */
export const HttpAppLive = Layer.unwrapEffect(
  // The head limit is read once here, not on every request.
  Effect.map(HeaderLimitConfig, (headLimit) =>
    HttpApiBuilder.serve((app) => requestIdMiddleware(shutdownGateMiddleware(headerLimitMiddleware(headLimit)(app)))))
).pipe(
  Layer.provide(DocsLive),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide(ErrorEnvelopeLive),
  Layer.provide(ApiLive),
  HttpMiddleware.withTracerDisabledWhen((request) => untracedPaths.has(pathOf(request)))
)
