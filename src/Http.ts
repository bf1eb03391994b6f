/**
 * Server wiring: the error envelope for every non-2xx answer (framework ones included),
 * /openapi.json, /docs and the handlers of every group. What runs before routing (request ids,
 * admission, head and body limits, sampling, the access log) is the front door's,
 * src/System/Server.ts.
 */
import { HttpApiBuilder, HttpApiError, HttpApp, HttpServerError, Multipart } from "@effect/platform"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Layer, Option } from "effect"
import { AdminHandlers } from "./Admin/Http.js"
import { HooklineApi } from "./Api.js"
import { AuthenticationLive } from "./Auth/Http.js"
import { InternalError, NotFound, RequestId, ServiceUnavailable, UnsupportedMediaType, ValidationFailed } from "./Errors.js"
import { HooksHandlers } from "./Hooks/Http.js"
import { WalletHandlers } from "./Ledger/Http.js"
import { PredictHandlers, UploadHandlers } from "./Predictions/Http.js"
import { DocsLive } from "./System/Docs.js"
import { SystemHandlers } from "./System/Http.js"
import { annotateRequestSpan, SpanAttributes } from "./Observability/Tracing.js"
import { noRouteMessage } from "./System/RouteHints.js"
import { isNulCharacterRefusal, nulCharacterRefused } from "./System/InputGuards.js"
import { WebhooksHandlers } from "./Webhooks/Http.js"

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

/** The request id on the server span of a traced request (a no-op when the request is not traced). */
const requestIdOnSpan = Effect.flatMap(RequestId, (requestId) => annotateRequestSpan(SpanAttributes.requestId, requestId))

type ApiLevelError = ValidationFailed | NotFound | UnsupportedMediaType | InternalError | ServiceUnavailable

/** A multipart Content-Type on a JSON route: the framework tried to parse the body as a form. */
const multipartRefused = new UnsupportedMediaType({
  message: "This route takes a JSON body: send Content-Type: application/json (multipart forms are not accepted)."
})

/**
 * PostgreSQL cancelled the statement (SQLSTATE 57014, query_canceled): DB_STATEMENT_TIMEOUT, or an
 * operator's pg_cancel_backend. Its transaction rolled back; a metered request refunds its hold.
 */
const isStatementCancelled = (value: unknown): boolean =>
  value instanceof SqlError && typeof value.cause === "object" && value.cause !== null &&
  "code" in value.cause && value.cause.code === "57014"

const statementTimedOut = new ServiceUnavailable({
  message: "The database took too long to answer and the request was cancelled; nothing was charged. Retry in a moment."
})

/**
 * The API-level middleware: runs inside the error encoder, so what it fails with is written as
 * the envelope. It maps the framework's own failures (no route, bad JSON, decode failures,
 * defects) to the contract's errors.
 */
export const ErrorEnvelopeLive = HttpApiBuilder.middleware(
  HooklineApi,
  (app: HttpApp.Default): HttpApp.Default<ApiLevelError> =>
    Effect.catchAllCause(Effect.zipRight(requestIdOnSpan, app), (cause): Effect.Effect<never, ApiLevelError> => {
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure)) {
        const error: unknown = failure.value
        if (error instanceof HttpApiError.HttpApiDecodeError) {
          return Effect.fail(new ValidationFailed({ message: describeDecodeError(error) }))
        }
        if (error instanceof Multipart.MultipartError) return Effect.fail(multipartRefused)
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
        if (value instanceof Multipart.MultipartError) return Effect.fail(multipartRefused)
        if (isStatementCancelled(value)) {
          return Effect.logWarning("a statement was cancelled by the database (DB_STATEMENT_TIMEOUT)").pipe(
            Effect.zipRight(Effect.fail(statementTimedOut))
          )
        }
        return Effect.logError("request failed with a defect", cause).pipe(
          Effect.zipRight(Effect.fail(new InternalError({ message: "Internal server error." })))
        )
      }
      return Effect.failCause(cause)
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
export const HttpAppLive = HttpApiBuilder.serve().pipe(
  Layer.provide(DocsLive),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide(ErrorEnvelopeLive),
  Layer.provide(ApiLive)
)
