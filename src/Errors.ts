/**
 * Every error the API can answer with, as a Schema-typed class plus its wire form.
 *
 * A domain error is a plain `Schema.TaggedErrorClass` with a message. Its *wire* schema encodes
 * it as the contract's envelope `{ error: { type, message, request_id } }` with its HTTP
 * status, and decodes the envelope back into the class so the typed client gets instances.
 */
import { Context, Data, Effect, Schema, SchemaGetter } from "effect"
import { HttpApiSchema } from "effect/http-api"

/** The id of the request being served; the request-id middleware provides it. */
export const RequestId = Context.Reference<string>("hookline/RequestId", { defaultValue: () => "req_unknown" })

const envelopeBody = (type: string) =>
  Schema.Struct({
    error: Schema.Struct({
      type: Schema.Literal(type),
      message: Schema.String,
      request_id: Schema.String
    })
  })

/** An error class whose encoded form is `{ _tag, message }`. */
type MessageError<A extends { readonly _tag: string; readonly message: string }> =
  & Schema.Codec<A, { readonly _tag: A["_tag"]; readonly message: string }>
  & (new(props: { readonly message: string }) => A)

/**
 * The type and HTTP status of each error: written once, read by its wire schema below and by the
 * envelopes the server writes by hand (src/System/Envelope.ts, src/System/Pipeline.ts).
 */
export const errorCodes = {
  InvalidCursor: { type: "invalid_cursor", status: 400 },
  InvalidApiKey: { type: "invalid_api_key", status: 401 },
  InsufficientCredits: { type: "insufficient_credits", status: 402 },
  SpendLimitReached: { type: "spend_limit_reached", status: 402 },
  ApiNotEnabled: { type: "api_not_enabled", status: 403 },
  AccountSuspended: { type: "account_suspended", status: 403 },
  NotFound: { type: "not_found", status: 404 },
  ValidationFailed: { type: "validation_error", status: 422 },
  PayloadTooLarge: { type: "payload_too_large", status: 413 },
  RateLimitExceeded: { type: "rate_limit_exceeded", status: 429 },
  InternalError: { type: "internal_error", status: 500 },
  ServiceUnavailable: { type: "service_unavailable", status: 503 },
  AuthorizationNotAllowed: { type: "authorization_not_allowed", status: 400 },
  UploadAlreadyUsed: { type: "upload_already_used", status: 409 },
  IdempotencyInProgress: { type: "idempotency_in_progress", status: 409 },
  UploadExpired: { type: "upload_expired", status: 410 },
  UnsupportedMediaType: { type: "unsupported_media_type", status: 415 },
  UnpaidClipsLimit: { type: "unpaid_clips_limit", status: 429 },
  TooManyPendingUploads: { type: "too_many_pending_uploads", status: 429 },
  // Answered by the request pipeline before any endpoint: no error class of its own.
  HeadersTooLarge: { type: "headers_too_large", status: 431 }
} as const satisfies Record<string, { readonly type: string; readonly status: number }>

export type ErrorTag = keyof typeof errorCodes

const envelope = <A extends { readonly _tag: ErrorTag; readonly message: string }>(
  errorClass: MessageError<A>,
  description: string,
  /** Components name; two wires of one error type with different descriptions need distinct ones. */
  identifier?: string
) => {
  const tag: A["_tag"] = new errorClass({ message: "" })._tag
  const { type, status } = errorCodes[tag]
  // OpenAPI describes the encoded side: the envelope carries the component's name and description.
  return envelopeBody(type).annotate({ identifier: identifier ?? `Error_${type}`, description }).pipe(
    Schema.decodeTo(errorClass, {
      decode: SchemaGetter.transform((body) => ({ _tag: tag, message: body.error.message })),
      encode: SchemaGetter.transformEffect((error) =>
        Effect.map(RequestId, (request_id) => ({ error: { type, message: error.message, request_id } }))
      )
    }),
    HttpApiSchema.status(status)
  )
}

export class InvalidCursor extends Schema.TaggedError<InvalidCursor>()("InvalidCursor", {
  message: Schema.String
}) {}
export const InvalidCursorWire = envelope(InvalidCursor, "The cursor is malformed, altered, or from another query.")

export class InvalidApiKey extends Schema.TaggedError<InvalidApiKey>()("InvalidApiKey", {
  message: Schema.String
}) {}
export const InvalidApiKeyWire = envelope(InvalidApiKey, "Missing or invalid API key, or a key sent in the query string.")

export class InsufficientCredits extends Schema.TaggedError<InsufficientCredits>()("InsufficientCredits", {
  message: Schema.String
}) {}
export const InsufficientCreditsWire = envelope(InsufficientCredits, "The wallet holds fewer credits than this request reserves.")

export class SpendLimitReached extends Schema.TaggedError<SpendLimitReached>()("SpendLimitReached", {
  message: Schema.String
}) {}
export const SpendLimitReachedWire = envelope(SpendLimitReached, "The API key's spend limit for the period would be passed; the message names the limit and the period's end. Topping up does not help."
)

export class ApiNotEnabled extends Schema.TaggedError<ApiNotEnabled>()("ApiNotEnabled", {
  message: Schema.String
}) {}
export const ApiNotEnabledWire = envelope(ApiNotEnabled, "The account's plan has no API access, or the key lacks the scope this route needs.")

export class AccountSuspended extends Schema.TaggedError<AccountSuspended>()("AccountSuspended", {
  message: Schema.String
}) {}
export const AccountSuspendedWire = envelope(AccountSuspended, "The account is suspended.")

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  message: Schema.String
}) {}
export const NotFoundWire = envelope(NotFound, "No such resource, or not visible to this key.")

export class ValidationFailed extends Schema.TaggedError<ValidationFailed>()("ValidationFailed", {
  message: Schema.String
}) {}
export const ValidationFailedWire = envelope(ValidationFailed, "The request is malformed or a parameter breaks its rule; the message names it.")

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  message: Schema.String
}) {}
export const PayloadTooLargeWire = envelope(PayloadTooLarge, "The request body is larger than allowed.")

export class RateLimitExceeded extends Schema.TaggedError<RateLimitExceeded>()("RateLimitExceeded", {
  message: Schema.String
}) {}
export const RateLimitExceededWire = envelope(RateLimitExceeded, "Too many requests; see Retry-After and the RateLimit headers.")

export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", {
  message: Schema.String
}) {}
export const InternalErrorWire = envelope(InternalError, "An unexpected server error; the request id identifies it in the logs.")

export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()("ServiceUnavailable", {
  message: Schema.String
}) {}

/**
 * A defect, not a contract error: the connection to the database was lost while a charge was
 * being recorded, so whether it was taken cannot be known here. Answered 503 saying so.
 */
export class ChargeOutcomeUnknown extends Data.TaggedError("ChargeOutcomeUnknown")<{ readonly credits: number; readonly cause: unknown }> {
  override get message() {
    return `The connection to the database was lost while this request's charge of ${this.credits} credit(s) was being ` +
      "recorded: its outcome is unknown. The credit history (GET /v1/wallet/transactions) shows whether it was taken, " +
      "under this request's X-Request-Id. Retry in a moment."
  }
}
export const ServiceUnavailableWire = envelope(ServiceUnavailable, "The service is not ready (database unreachable or not migrated).")
export const StatementTimedOutWire = envelope(ServiceUnavailable, "A database statement ran longer than DB_STATEMENT_TIMEOUT (10 seconds by default) and was cancelled; nothing was charged. Retry in a moment.",
  "Error_service_unavailable_statement_timed_out"
)
export const DatabaseUnavailableWire = envelope(ServiceUnavailable, "The database cannot be reached (a restart or failover): the request was not completed. Retry after Retry-After seconds.",
  "Error_service_unavailable_database_unavailable"
)
export const SearchTimedOutWire = envelope(ServiceUnavailable, "The search timed out: the search or list ran longer than SEARCH_TIMEOUT (3 seconds by default) and was cancelled; nothing was charged. " +
    "Retry, or use more specific words. Also answered while the server shuts down.",
  "Error_service_unavailable_search_timed_out"
)

export class IdempotencyInProgress extends Schema.TaggedError<IdempotencyInProgress>()("IdempotencyInProgress", {
  message: Schema.String
}) {}
export const IdempotencyInProgressWire = envelope(IdempotencyInProgress, "The first request sent with this Idempotency-Key is still committing, or its outcome is unknown (its connection to the " +
    "database was lost at COMMIT and the database cannot tell yet whether it committed). Retry with the same key: once the outcome is " +
    "known you get that request's answer, or, if it did not commit, it runs once."
)

// Upload PUT errors (docs/behaviour.md, "Clip scoring").
export class AuthorizationNotAllowed extends Schema.TaggedError<AuthorizationNotAllowed>()("AuthorizationNotAllowed", {
  message: Schema.String
}) {}
export const AuthorizationNotAllowedWire = envelope(AuthorizationNotAllowed, "The upload PUT must not carry an Authorization header.")

export class UploadAlreadyUsed extends Schema.TaggedError<UploadAlreadyUsed>()("UploadAlreadyUsed", {
  message: Schema.String
}) {}
export const UploadAlreadyUsedWire = envelope(UploadAlreadyUsed, "The one-time upload link was already used.")

export class UploadExpired extends Schema.TaggedError<UploadExpired>()("UploadExpired", {
  message: Schema.String
}) {}
export const UploadExpiredWire = envelope(UploadExpired, "The upload link has expired.")

export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", {
  message: Schema.String
}) {}
export const UnsupportedMediaTypeWire = envelope(UnsupportedMediaType, "The body's media type is not accepted: JSON routes take application/json, the upload takes an MP4, MOV or WebM video.")

/** The errors any /v1 route may answer with once its key is accepted. */
export type AccessError = InvalidApiKey | AccountSuspended | ApiNotEnabled | RateLimitExceeded

// Clip-scoring quotas: 429 like a rate limit, with Retry-After, but a type of their own.
export class UnpaidClipsLimit extends Schema.TaggedError<UnpaidClipsLimit>()("UnpaidClipsLimit", {
  message: Schema.String
}) {}
export const UnpaidClipsLimitWire = envelope(UnpaidClipsLimit, "The account already keeps as many clips waiting for credits as allowed; top up and retry start them, or wait (Retry-After) until one expires.")

export class TooManyPendingUploads extends Schema.TaggedError<TooManyPendingUploads>()("TooManyPendingUploads", {
  message: Schema.String
}) {}
export const TooManyPendingUploadsWire = envelope(TooManyPendingUploads, "This key already holds as many unused upload links as allowed; use them or wait (Retry-After) until one expires.")
