/** The account webhook contract: settings, rotation, the test send and the delivery log. */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import { InvalidCursorWire } from "../Errors.js"
import { acceptsIdempotencyKey, IdempotencyKeys } from "../Idempotency/Api.js"
import { Cursor, ListOf, PageLimit, strict, Timestamp, timestampInput } from "../Schemas.js"

/** Every event type a webhook can receive. */
export const EventType = Schema.Literals([
  "prediction.succeeded",
  "prediction.failed",
  "wallet.low_balance",
  "wallet.depleted",
  "key.spend_limit_reached"
])
export type EventType = typeof EventType.Type

/** A webhook's event selection: event types, or "*" for all (also those added later). */
export const EventSelection = Schema.Union([Schema.Literal("*"), EventType])

export const DisabledReason = Schema.Literals(["gone", "failing"]).annotate({
  description: "Why Hookline disabled the webhook: `gone` (the endpoint answered 410 Gone) or `failing` (every " +
    "delivery failed for WEBHOOK_DISABLE_AFTER, 5 days by default). Null when enabled or disabled by DELETE or plan loss."
})

export const Webhook = Schema.Struct({
  object: Schema.Literal("webhook"),
  url: Schema.NullOr(Schema.String),
  configured: Schema.Boolean,
  events: Schema.Array(EventSelection).annotate({ description: "The event types sent; [\"*\"]: all." }),
  disabled_reason: Schema.NullOr(DisabledReason),
  disabled_at: Schema.NullOr(Timestamp)
}).annotate({ identifier: "Webhook" })
export type Webhook = typeof Webhook.Type

export const WebhookSecret = Schema.Struct({
  ...Webhook.fields,
  secret: Schema.optionalKey(Schema.String)
}).annotate({ identifier: "WebhookSecret" })
export type WebhookSecret = typeof WebhookSecret.Type

export const WebhookTest = Schema.Struct({
  object: Schema.Literal("webhook_test"),
  delivered: Schema.Boolean,
  status_code: Schema.NullOr(Schema.Finite),
  event: Schema.Literal("prediction.succeeded")
}).annotate({ identifier: "WebhookTest" })
export type WebhookTest = typeof WebhookTest.Type

export const SetWebhook = Schema.Struct({
  url: Schema.String,
  events: Schema.optionalKey(
    Schema.Array(EventSelection).check(Schema.isMinLength(1)).annotate({
      description: "Event types to receive, or [\"*\"] for all. Absent: all for a new webhook, unchanged otherwise."
    })
  )
}).annotate({ identifier: "SetWebhook" })

export const DeliveryStatus = Schema.Literals(["pending", "delivered", "failed"])
export type DeliveryStatus = typeof DeliveryStatus.Type

export const WebhookDelivery = Schema.Struct({
  object: Schema.Literal("webhook_delivery"),
  id: Schema.String,
  event_id: Schema.String.annotate({ description: "The event's id, sent as webhook-id on every attempt (receivers dedupe by it)." }),
  event_type: EventType,
  status: DeliveryStatus,
  attempts: Schema.Int,
  last_status_code: Schema.NullOr(Schema.Int).annotate({ description: "The receiver's last HTTP status; null when no answer came." }),
  last_error: Schema.NullOr(Schema.String).annotate({
    description: "Why the last attempt failed, in Hookline's words (status, timeout, connection, refused URL); never the receiver's body."
  }),
  next_attempt_at: Schema.NullOr(Timestamp).annotate({ description: "When a pending delivery is next attempted." }),
  created_at: Timestamp,
  completed_at: Schema.NullOr(Timestamp)
}).annotate({ identifier: "WebhookDelivery" })
export type WebhookDelivery = typeof WebhookDelivery.Type

export const WebhookDeliveryList = ListOf(WebhookDelivery, "WebhookDeliveryList")
export type WebhookDeliveryList = typeof WebhookDeliveryList.Type

export const DeliveryParams = Schema.Struct({
  status: Schema.optionalKey(DeliveryStatus.annotate({ description: "Only deliveries in this status." })),
  limit: Schema.optionalKey(PageLimit),
  cursor: Schema.optionalKey(Cursor)
})
export type DeliveryParams = typeof DeliveryParams.Type

const deliveryIdParams = { id: Schema.String }

export const RecoverDeliveries = Schema.Struct({
  since: timestampInput(
    "Re-send the failed deliveries created at or after this time (ISO 8601); at most WEBHOOK_DELIVERY_RETENTION (30 days) ago."
  )
}).annotate({ identifier: "RecoverDeliveries" })
export type RecoverDeliveries = typeof RecoverDeliveries.Type

export const WebhookRecovery = Schema.Struct({
  object: Schema.Literal("webhook_recovery"),
  since: Timestamp,
  queued: Schema.Int.annotate({ description: "How many failed deliveries were queued again." }),
  last_attempt_at: Schema.NullOr(Timestamp).annotate({
    description: "When the last of them is due: they go out oldest first, one every WEBHOOK_RECOVER_PACE."
  })
}).annotate({ identifier: "WebhookRecovery" })
export type WebhookRecovery = typeof WebhookRecovery.Type

/** What the user and the admin endpoint say of a recovery. */
export const recoverDescription = "Queues again every failed delivery created since `since` (failed after its retries, or dropped " +
  "while the webhook was disabled), oldest first, one every WEBHOOK_RECOVER_PACE (100 ms), each with its own event " +
  "(same webhook-id and body, freshly signed) and one attempt. Answers how many it queued. 422 when `since` is older " +
  "than the retention or in the future, or the webhook is not enabled. Costs 0."

export class WebhooksApi extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.get("get", "/webhooks", { success: Webhook })
      .annotate(AccessRule, needs("webhooks:write", true))
      .annotate(OpenApi.Summary, "Get the webhook")
      .annotate(OpenApi.Description, "Costs 0. Stays available after plan loss. Needs webhooks:write.")
  )
  .add(
    HttpApiEndpoint.put("set", "/webhooks", { payload: SetWebhook, success: WebhookSecret })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Set the webhook URL")
      .annotate(
        OpenApi.Description,
        "An absolute https URL (at most 2,048 characters, no user info or fragment, not a private address). " +
          "The secret is returned only when the webhook is first created. Costs 0."
      )
  )
  .add(
    HttpApiEndpoint.delete("disable", "/webhooks", { success: Webhook })
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Disable the webhook")
      .annotate(OpenApi.Description, "Sets configured to false; url and secret are kept. Costs 0.")
  )
  .add(
    HttpApiEndpoint.post("rotate", "/webhooks/rotate", { success: WebhookSecret })
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Rotate the webhook secret")
      .annotate(
        OpenApi.Description,
        "Issues a new secret, shown once (and in the replay to the same Idempotency-Key). For 24 hours deliveries carry " +
          "signatures with both secrets. No body. Costs 0."
      )
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.post("test", "/webhooks/test", { success: WebhookTest })
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Send a test event")
      .annotate(
        OpenApi.Description,
        "Delivers one signed synthetic prediction.succeeded event, synchronously. 422 when no webhook is configured. Costs 0."
      )
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.get("deliveries", "/webhooks/deliveries", {
      query: DeliveryParams,
      success: WebhookDeliveryList,
      error: InvalidCursorWire
    })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(AccessRule, needs("webhooks:write", true))
      .annotate(OpenApi.Summary, "List webhook deliveries")
      .annotate(
        OpenApi.Description,
        "The account's event deliveries, newest first, kept WEBHOOK_DELIVERY_RETENTION (30 days). Filter by `status`; " +
          "keyset pages (`limit` 1 to 100, default 50; `cursor` from next_cursor with the same filter). Costs 0. " +
          "Stays available after plan loss. Needs webhooks:write."
      )
  )
  .add(
    HttpApiEndpoint.get("delivery", "/webhooks/deliveries/:id", { params: deliveryIdParams, success: WebhookDelivery })
      .annotate(AccessRule, needs("webhooks:write", true))
      .annotate(OpenApi.Summary, "Get a webhook delivery")
      .annotate(OpenApi.Description, "404 for an id unknown to this account. Costs 0. Needs webhooks:write.")
  )
  .add(
    HttpApiEndpoint.post("retryDelivery", "/webhooks/deliveries/:id/retry", { params: deliveryIdParams, success: WebhookDelivery })
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Retry a webhook delivery now")
      .annotate(
        OpenApi.Description,
        "Queues a pending or failed delivery for an attempt now, with the same event (same webhook-id and body, freshly " +
          "signed), and answers it as queued. A failed delivery gets this one attempt, no further schedule. 422 when it " +
          "was delivered already or the webhook is disabled. Costs 0; counts against the key's rate limit."
      )
  )
  .add(
    HttpApiEndpoint.post("recoverDeliveries", "/webhooks/deliveries/recover", { payload: RecoverDeliveries, success: WebhookRecovery })
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Re-send failed deliveries since a time")
      .annotate(OpenApi.Description, recoverDescription)
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Webhooks")
{}
