/**
 * The error envelope for what the framework answers by itself: every failure that is not one
 * of the contract's errors becomes one (decode failures 422, a multipart body on a JSON route
 * 415, a statement the database cancelled 503, a database that cannot be reached or a connection
 * lost 503, a defect 500; every 503 with Retry-After), in two places:
 * - `ApiErrors` (src/System/ApiErrors.ts), an HttpApiMiddleware on every endpoint (outermost, so it also sees the bearer
 *   middleware's failures): what it fails with is encoded by the endpoint's error schemas,
 *   and /openapi.json lists these errors on every route;
 * - `answerCause`, used by the request pipeline for what happens outside any endpoint (no
 *   route, /docs, a defect in encoding), writing the envelope itself.
 */
import { Cause, Config, Duration, Effect, Option, type Types } from "effect"
import { HttpEffect, HttpIncomingMessage, HttpServerError, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiError } from "effect/http-api"
import * as SchemaIssue from "effect/SchemaIssue"
import {
  ChargeOutcomeUnknown,
  errorCodes,
  type ErrorTag,
  InternalError,
  PayloadTooLarge,
  ServiceUnavailable,
  UnsupportedMediaType,
  ValidationFailed
} from "../Errors.js"
import { newId } from "../Ids.js"
import { recordDatabaseUnavailable, recordOutcomeUnknown } from "../Observability/Metrics.js"
import { isDatabaseUnavailable } from "../Sql.js"
import { ApiErrors } from "./ApiErrors.js"
import { isNulCharacterRefusal, isStatementCancelled, nulCharacterRefused } from "./InputGuards.js"

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

/** The properties the schema that refused an unknown key allows, from the first such issue. */
const allowedKeys = (issue: SchemaIssue.Issue): ReadonlyArray<string> | null => {
  if (issue._tag === "UnexpectedKey") {
    return issue.ast._tag === "Objects" ? issue.ast.propertySignatures.map((property) => String(property.name)) : null
  }
  const children: ReadonlyArray<SchemaIssue.Issue> = "issues" in issue ? issue.issues : "issue" in issue ? [issue.issue] : []
  for (const child of children) {
    const found = allowedKeys(child)
    if (found !== null) return found
  }
  return null
}

/** One short sentence naming the field and the rule, from a decode failure's issues. */
export const describeDecodeError = (error: HttpApiError.HttpApiSchemaError): string => {
  const issues = formatIssues(error.cause.issue).issues
  const issue = issues[0]
  if (issue === undefined) return "The request is not valid."
  if (error.kind === "Payload" && issue.message === "Expected a valid JSON body") return "request: the body is not valid JSON"
  const path = (issue.path ?? []).map((segment) => String(typeof segment === "object" ? segment.key : segment))
  const field = path.length === 0 ? "request" : path.join(".")
  const rule = issue.message
    // JSON's number codec also takes the three non-finite spellings, and names only them.
    .replace(/^Expected "Infinity" \| "-Infinity" \| "NaN"$/, "must be a number")
    .replace(/^Expected (.*), got (.*)$/s, "must be $1, got $2")
    .replace(/^(Unexpected key.*|Expected no excess property)$/s, () => {
      const allowed = allowedKeys(error.cause.issue)
      return `is not an allowed property${allowed === null || allowed.length === 0 ? "" : ` (allowed: ${allowed.join(", ")})`}`
    })
    .replace(/^Missing key.*$/s, "is required")
  return `${field}: ${rule}${issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""}`
}

const multipartRefused = new UnsupportedMediaType({
  message: "This route takes a JSON body: send Content-Type: application/json (multipart forms are not accepted)."
})

const statementTimedOut = new ServiceUnavailable({
  message: "The database took too long to answer and the request was cancelled; nothing was charged. Retry in a moment."
})

const databaseUnavailable = new ServiceUnavailable({
  message: "The database cannot be reached right now (a restart or failover); the request was not completed. Retry in a moment (see Retry-After)."
})

/** The Retry-After of every 503, in whole seconds: how soon a client may try again (a database restart takes seconds). */
export const UnavailableRetryAfter = Config.Duration("UNAVAILABLE_RETRY_AFTER").pipe(
  Config.withDefault(Duration.seconds(1)),
  Config.map((delay) => String(Math.max(1, Math.ceil(Duration.toSeconds(delay)))))
)

const retryAfterValue: Effect.Effect<string, Config.ConfigError> = UnavailableRetryAfter

/** Adds Retry-After to the answer of the request this fiber serves. */
const addRetryAfter = Effect.flatMap(retryAfterValue, (seconds) =>
  Effect.withFiber((fiber) => {
    HttpEffect.appendPreResponseHandlerUnsafe(fiber.context, (_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", seconds)))
    return Effect.void
  })).pipe(Effect.orDie)

/**
 * During an outage every request fails the same way: one warning per DB_UNAVAILABLE_LOG_INTERVAL
 * with the count since the last, not one per request (the metric counts each).
 */
const UnavailableLogInterval = Config.Duration("DB_UNAVAILABLE_LOG_INTERVAL").pipe(Config.withDefault(Duration.seconds(5)))
let unavailableSinceLog = 0
let unavailableLoggedAt = 0

const noteDatabaseUnavailable = (cause: Cause.Cause<unknown>) =>
  Effect.gen(function*() {
    recordDatabaseUnavailable()
    unavailableSinceLog++
    const interval = Duration.toMillis(yield* Effect.orDie(UnavailableLogInterval))
    const now = Date.now()
    if (now - unavailableLoggedAt < interval) return
    unavailableLoggedAt = now
    const requests = unavailableSinceLog
    unavailableSinceLog = 0
    const error = Cause.squash(cause)
    yield* Effect.logWarning("the database cannot be reached; answering 503").pipe(
      Effect.annotateLogs({ requests, error: error instanceof Error ? error.message : String(error) })
    )
  })

const internalError = new InternalError({ message: "Internal server error." })

type FrameworkError = ValidationFailed | UnsupportedMediaType | PayloadTooLarge | InternalError | ServiceUnavailable

/**
 * A body over the route's MaxBodySize (src/System/Routes.ts): 413, and the connection closed, as
 * the rest of the body is never read.
 */
const bodyTooLarge = Effect.withFiber((fiber) => {
  const limit = fiber.getRef(HttpIncomingMessage.MaxBodySize)
  HttpEffect.appendPreResponseHandlerUnsafe(fiber.context, (_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, "connection", "close")))
  return Effect.fail(new PayloadTooLarge({
    message: limit === undefined ? "The request body is too large." : `The request body is larger than ${limit} bytes.`
  }))
})

/** What a defect is answered with: a contract error, logged when it is a bug. */
const fromDefect = (defect: unknown, cause: Cause.Cause<unknown>): Effect.Effect<never, FrameworkError> => {
  if (HttpApiError.HttpApiSchemaError.is(defect)) {
    return defect.kind === "Body" || defect.kind === "ResponseHeaders"
      ? Effect.logError("a response does not match its schema", cause).pipe(Effect.andThen(Effect.fail(internalError)))
      : Effect.fail(new ValidationFailed({ message: describeDecodeError(defect) }))
  }
  if (isNulCharacterRefusal(defect)) return Effect.fail(nulCharacterRefused)
  if (defect instanceof ChargeOutcomeUnknown) {
    recordOutcomeUnknown()
    return noteDatabaseUnavailable(cause).pipe(
      Effect.andThen(Effect.logWarning("a charge's outcome is unknown: the connection was lost while it was recorded")),
      Effect.andThen(Effect.fail(new ServiceUnavailable({ message: defect.message })))
    )
  }
  if (isDatabaseUnavailable(defect)) return noteDatabaseUnavailable(cause).pipe(Effect.andThen(Effect.fail(databaseUnavailable)))
  if (isStatementCancelled(defect)) {
    return Effect.logWarning("a statement was cancelled by the database (DB_STATEMENT_TIMEOUT)").pipe(
      Effect.andThen(Effect.fail(statementTimedOut))
    )
  }
  if (HttpServerError.isHttpServerError(defect) && defect.reason._tag === "RequestParseError") {
    return defect.reason.reason === "BodyTooLarge"
      ? bodyTooLarge
      : Effect.fail(new ValidationFailed({ message: "request: the body could not be read" }))
  }
  return Effect.logError("request failed with a defect", cause).pipe(Effect.andThen(Effect.fail(internalError)))
}


const withRetryAfterOn503 = (error: FrameworkError) => error._tag === "ServiceUnavailable" ? addRetryAfter : Effect.void

const isMultipart = (contentType: string | undefined) => contentType !== undefined && /^multipart\//i.test(contentType)

/**
 * The middleware: a body with a Content-Type the endpoint does not take is read as JSON when the
 * endpoint takes JSON (clients often send JSON as text/plain), and refused 415 when multipart.
 */
export const ApiErrorsLive = ApiErrors.of((httpEffect, { endpoint }) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const contentType = request.headers["content-type"]
    let effect = httpEffect
    if (endpoint.payload.size > 0 && contentType !== undefined && endpoint.payload.has("application/json")) {
      const mediaType = contentType.split(";")[0].trim().toLowerCase()
      if (!endpoint.payload.has(mediaType)) {
        if (isMultipart(contentType)) return Effect.fail(multipartRefused)
        effect = Effect.provideService(
          httpEffect,
          HttpServerRequest.HttpServerRequest,
          request.modify({ headers: { ...request.headers, "content-type": "application/json" } })
        )
      }
    }
    return Effect.catchCause(effect, (cause): Effect.Effect<never, FrameworkError | Types.unhandled> => {
      const failure = Cause.findErrorOption(cause)
      if (Option.isSome(failure)) {
        const error: unknown = failure.value
        if (error instanceof ServiceUnavailable) return Effect.andThen(addRetryAfter, Effect.failCause(cause))
        return HttpApiError.HttpApiSchemaError.is(error) ? fromDefect(error, cause) : Effect.failCause(cause)
      }
      const defect = Cause.findDefect(cause)
      return defect._tag === "Success" ? fromDefect(defect.success, cause).pipe(Effect.tapError(withRetryAfterOn503)) : Effect.failCause(cause)
    })
  })
)

/** The envelope as the framework's response, for answers given before or beside any endpoint. */
export const envelopeResponse = (error: ErrorTag, message: string, requestId: string, headers: Record<string, string> = {}) => {
  const { type, status } = errorCodes[error]
  return HttpServerResponse.jsonUnsafe({ error: { type, message, request_id: requestId } }, { status, headers })
}

/** The envelope as a web Response, for the one answer given outside Effect (the Bun adapter while the app is not served). */
export const webEnvelope = (error: ErrorTag, message: string, headers: Record<string, string> = {}): Response => {
  const { type, status } = errorCodes[error]
  const requestId = newId("req")
  return Response.json({ error: { type, message, request_id: requestId } }, { status, headers: { ...headers, "x-request-id": requestId } })
}

/**
 * The answer to a failure outside any endpoint, in the envelope; an interruption stays one.
 * `noRoute` says why no route took the request (src/System/Routes.ts).
 */
export const answerCause = <E>(
  cause: Cause.Cause<E>,
  requestId: string,
  noRoute: () => string
): Effect.Effect<HttpServerResponse.HttpServerResponse, E> => {
  if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) {
    const error: unknown = failure.value
    if (HttpServerError.isHttpServerError(error) && error.reason._tag === "RouteNotFound") {
      return Effect.succeed(envelopeResponse("NotFound", noRoute(), requestId))
    }
  }
  const defect = Cause.findDefect(cause)
  const reason = defect._tag === "Success" ? defect.success : Option.getOrUndefined(failure)
  return fromDefect(reason, cause).pipe(
    Effect.catch((error) => {
      const response = envelopeResponse(error._tag, error.message, requestId)
      return error._tag === "ServiceUnavailable"
        ? Effect.map(retryAfterValue, (seconds) => HttpServerResponse.setHeader(response, "retry-after", seconds)).pipe(Effect.orDie)
        : Effect.succeed(response)
    })
  )
}

export { ApiErrors } from "./ApiErrors.js"
