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

const envelope = <A extends { readonly _tag: string; readonly message: string }>(
  errorClass: MessageError<A>,
  type: string,
  status: number,
  description: string,
  /** Components name; two wires of one error type with different descriptions need distinct ones. */
  identifier = `Error_${type}`
) => {
  const tag: A["_tag"] = new errorClass({ message: "" })._tag
  // OpenAPI describes the encoded side: the envelope carries the component's name and description.
  return envelopeBody(type).annotate({ identifier, description }).pipe(
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
export const InvalidCursorWire = envelope(InvalidCursor, "invalid_cursor", 400, "The cursor is malformed, altered, or from another query.")

export class InvalidApiKey extends Schema.TaggedError<InvalidApiKey>()("InvalidApiKey", {
  message: Schema.String
}) {}
export const InvalidApiKeyWire = envelope(InvalidApiKey, "invalid_api_key", 401, "Missing or invalid API key, or a key sent in the query string.")

export class InsufficientCredits extends Schema.TaggedError<InsufficientCredits>()("InsufficientCredits", {
  message: Schema.String
}) {}
export const InsufficientCreditsWire = envelope(InsufficientCredits, "insufficient_credits", 402, "The wallet holds fewer credits than this request reserves.")

export class SpendLimitReached extends Schema.TaggedError<SpendLimitReached>()("SpendLimitReached", {
  message: Schema.String
}) {}
export const SpendLimitReachedWire = envelope(
  SpendLimitReached,
  "spend_limit_reached",
  402,
  "The API key's spend limit for the period would be passed; the message names the limit and the period's end. Topping up does not help."
)

export class ApiNotEnabled extends Schema.TaggedError<ApiNotEnabled>()("ApiNotEnabled", {
  message: Schema.String
}) {}
export const ApiNotEnabledWire = envelope(ApiNotEnabled, "api_not_enabled", 403, "The account's plan has no API access, or the key lacks the scope this route needs.")

export class AccountSuspended extends Schema.TaggedError<AccountSuspended>()("AccountSuspended", {
  message: Schema.String
}) {}
export const AccountSuspendedWire = envelope(AccountSuspended, "account_suspended", 403, "The account is suspended.")

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  message: Schema.String
}) {}
export const NotFoundWire = envelope(NotFound, "not_found", 404, "No such resource, or not visible to this key.")

export class ValidationFailed extends Schema.TaggedError<ValidationFailed>()("ValidationFailed", {
  message: Schema.String
}) {}
export const ValidationFailedWire = envelope(ValidationFailed, "validation_error", 422, "The request is malformed or a parameter breaks its rule; the message names it.")

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  message: Schema.String
}) {}
export const PayloadTooLargeWire = envelope(PayloadTooLarge, "payload_too_large", 413, "The request body is larger than allowed.")

export class RateLimitExceeded extends Schema.TaggedError<RateLimitExceeded>()("RateLimitExceeded", {
  message: Schema.String
}) {}
export const RateLimitExceededWire = envelope(RateLimitExceeded, "rate_limit_exceeded", 429, "Too many requests; see Retry-After and the RateLimit headers.")

export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", {
  message: Schema.String
}) {}
export const InternalErrorWire = envelope(InternalError, "internal_error", 500, "An unexpected server error; the request id identifies it in the logs.")

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
export const ServiceUnavailableWire = envelope(ServiceUnavailable, "service_unavailable", 503, "The service is not ready (database unreachable or not migrated).")
export const StatementTimedOutWire = envelope(
  ServiceUnavailable,
  "service_unavailable",
  503,
  "A database statement ran longer than DB_STATEMENT_TIMEOUT (10 seconds by default) and was cancelled; nothing was charged. Retry in a moment.",
  "Error_service_unavailable_statement_timed_out"
)
export const DatabaseUnavailableWire = envelope(
  ServiceUnavailable,
  "service_unavailable",
  503,
  "The database cannot be reached (a restart or failover): the request was not completed. Retry after Retry-After seconds.",
  "Error_service_unavailable_database_unavailable"
)
export const SearchTimedOutWire = envelope(
  ServiceUnavailable,
  "service_unavailable",
  503,
  "The search timed out: the search or list ran longer than SEARCH_TIMEOUT (3 seconds by default) and was cancelled; nothing was charged. " +
    "Retry, or use more specific words. Also answered while the server shuts down.",
  "Error_service_unavailable_search_timed_out"
)

// Upload PUT errors (docs/behaviour.md, "Clip scoring").
export class AuthorizationNotAllowed extends Schema.TaggedError<AuthorizationNotAllowed>()("AuthorizationNotAllowed", {
  message: Schema.String
}) {}
export const AuthorizationNotAllowedWire = envelope(AuthorizationNotAllowed, "authorization_not_allowed", 400, "The upload PUT must not carry an Authorization header.")

export class UploadAlreadyUsed extends Schema.TaggedError<UploadAlreadyUsed>()("UploadAlreadyUsed", {
  message: Schema.String
}) {}
export const UploadAlreadyUsedWire = envelope(UploadAlreadyUsed, "upload_already_used", 409, "The one-time upload link was already used.")

export class UploadExpired extends Schema.TaggedError<UploadExpired>()("UploadExpired", {
  message: Schema.String
}) {}
export const UploadExpiredWire = envelope(UploadExpired, "upload_expired", 410, "The upload link has expired.")

export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", {
  message: Schema.String
}) {}
export const UnsupportedMediaTypeWire = envelope(UnsupportedMediaType, "unsupported_media_type", 415, "The body's media type is not accepted: JSON routes take application/json, the upload takes an MP4, MOV or WebM video.")

/** The errors any /v1 route may answer with once its key is accepted. */
export type AccessError = InvalidApiKey | AccountSuspended | ApiNotEnabled | RateLimitExceeded

// Clip-scoring quotas: 429 like a rate limit, with Retry-After, but a type of their own.
export class UnpaidClipsLimit extends Schema.TaggedError<UnpaidClipsLimit>()("UnpaidClipsLimit", {
  message: Schema.String
}) {}
export const UnpaidClipsLimitWire = envelope(UnpaidClipsLimit, "unpaid_clips_limit", 429, "The account already keeps as many clips waiting for credits as allowed; top up and retry start them, or wait (Retry-After) until one expires.")

export class TooManyPendingUploads extends Schema.TaggedError<TooManyPendingUploads>()("TooManyPendingUploads", {
  message: Schema.String
}) {}
export const TooManyPendingUploadsWire = envelope(TooManyPendingUploads, "too_many_pending_uploads", 429, "This key already holds as many unused upload links as allowed; use them or wait (Retry-After) until one expires.")
