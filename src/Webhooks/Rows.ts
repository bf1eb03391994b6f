/** The rows and requests of the webhook repository (Repo.ts), as schemas. */
import { Schema } from "effect"
import { DeliveryStatus, EventType } from "./Api.js"

/** A webhook as its API resource shows it. */
export const WebhookState = Schema.Struct({
  url: Schema.String,
  enabled: Schema.Boolean,
  /** Null: all event types. */
  events: Schema.NullOr(Schema.Array(EventType)),
  disabled_reason: Schema.NullOr(Schema.Literals(["gone", "failing"])),
  disabled_at: Schema.NullOr(Schema.Date)
})
export type WebhookState = typeof WebhookState.Type

/** A webhook with its sealed secrets. */
export const WebhookRow = Schema.Struct({
  ...WebhookState.fields,
  secret_ciphertext: Schema.String,
  /** Null once the rotation window has passed. */
  previous_secret_ciphertext: Schema.NullOr(Schema.String)
})
export type WebhookRow = typeof WebhookRow.Type

/** One row of the delivery log. */
export const DeliveryRow = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  event_type: EventType,
  status: DeliveryStatus,
  attempts: Schema.Number,
  last_status_code: Schema.NullOr(Schema.Number),
  last_error: Schema.NullOr(Schema.String),
  next_attempt_at: Schema.Date,
  created_at: Schema.Date,
  completed_at: Schema.NullOr(Schema.Date)
})
export type DeliveryRow = typeof DeliveryRow.Type

/** A delivery a dispatcher has claimed, with what it needs to attempt it. */
export const ClaimedRow = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  account_id: Schema.String,
  /** This attempt's number (1 for the first). */
  attempts: Schema.Number,
  body: Schema.String,
  url: Schema.NullOr(Schema.String),
  enabled: Schema.NullOr(Schema.Boolean),
  secret_ciphertext: Schema.NullOr(Schema.String),
  previous_secret_ciphertext: Schema.NullOr(Schema.String)
})
export type ClaimedRow = typeof ClaimedRow.Type

export const Selection = Schema.NullOr(Schema.Array(EventType))
export const Millis = Schema.Number
/** The delivery clock's "now" (Effect's Clock). */
export const Now = Schema.Date

/** What an attempt's outcome writes (recordAttempt). */
export const AttemptRecord = Schema.Struct({
  deliveryId: Schema.String,
  accountId: Schema.String,
  token: Schema.String,
  attempt: Schema.Number,
  dispatcher: Schema.String,
  statusCode: Schema.NullOr(Schema.Number),
  durationMs: Schema.Number,
  error: Schema.NullOr(Schema.String),
  /** The delivery's state after this attempt. */
  status: DeliveryStatus,
  /** Until the next attempt (pending only). */
  delayMs: Millis,
  delivered: Schema.Boolean,
  /** The endpoint answered 410 Gone: the webhook is disabled at once. */
  gone: Schema.Boolean,
  disableAfterMs: Millis,
  now: Now
})
export type AttemptRecord = typeof AttemptRecord.Type

/** An event for the outbox (enqueueDelivery). */
export const EnqueueRequest = Schema.Struct({
  deliveryId: Schema.String,
  eventId: Schema.String,
  accountId: Schema.String,
  type: EventType,
  body: Schema.String,
  now: Now
})

/** A page of the delivery log (listDeliveries): after `afterId` when given. */
export const ListRequest = Schema.Struct({
  accountId: Schema.String,
  status: Schema.UndefinedOr(DeliveryStatus),
  afterId: Schema.UndefinedOr(Schema.String),
  limit: Schema.Number
})

/** A claimed delivery, by its claim token (dropForDisabledWebhook, releaseClaim). */
export const ClaimRequest = Schema.Struct({ deliveryId: Schema.String, token: Schema.String, now: Now })
