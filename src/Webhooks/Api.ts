/** The account webhook contract (spec 2.9, 3.2, 4.11, 6). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import { acceptsIdempotencyKey } from "../Idempotency/Api.js"
import { strict } from "../Schemas.js"

export const Webhook = Schema.Struct({
  object: Schema.Literal("webhook"),
  url: Schema.NullOr(Schema.String),
  configured: Schema.Boolean
}).annotations({ identifier: "Webhook" })
export type Webhook = typeof Webhook.Type

export const WebhookSecret = Schema.Struct({
  ...Webhook.fields,
  secret: Schema.optional(Schema.String)
}).annotations({ identifier: "WebhookSecret" })
export type WebhookSecret = typeof WebhookSecret.Type

export const WebhookTest = Schema.Struct({
  object: Schema.Literal("webhook_test"),
  delivered: Schema.Boolean,
  status_code: Schema.NullOr(Schema.Number),
  event: Schema.Literal("prediction.succeeded")
}).annotations({ identifier: "WebhookTest" })
export type WebhookTest = typeof WebhookTest.Type

export const SetWebhook = Schema.Struct({ url: Schema.String }).annotations({ ...strict, identifier: "SetWebhook" })

export class WebhooksApi extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.get("get", "/webhooks")
      .addSuccess(Webhook)
      .annotate(AccessRule, needs("webhooks:write", true))
      .annotate(OpenApi.Summary, "Get the webhook")
      .annotate(OpenApi.Description, "Costs 0. Stays available after plan loss. Needs webhooks:write.")
  )
  .add(
    HttpApiEndpoint.put("set", "/webhooks")
      .setPayload(SetWebhook)
      .addSuccess(WebhookSecret)
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Set the webhook URL")
      .annotate(
        OpenApi.Description,
        "An absolute https URL (at most 2,048 characters, no user info or fragment, not a private address). " +
          "The secret is returned only when the webhook is first created. Costs 0."
      )
  )
  .add(
    HttpApiEndpoint.del("disable", "/webhooks")
      .addSuccess(Webhook)
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Disable the webhook")
      .annotate(OpenApi.Description, "Sets configured to false; url and secret are kept. Costs 0.")
  )
  .add(
    HttpApiEndpoint.post("rotate", "/webhooks/rotate")
      .addSuccess(WebhookSecret)
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Rotate the webhook secret")
      .annotate(
        OpenApi.Description,
        "Issues a new secret, shown once (and in the replay to the same Idempotency-Key). For 24 hours deliveries carry " +
          "signatures with both secrets. No body. Costs 0."
      )
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.post("test", "/webhooks/test")
      .addSuccess(WebhookTest)
      .annotate(AccessRule, needs("webhooks:write"))
      .annotate(OpenApi.Summary, "Send a test event")
      .annotate(
        OpenApi.Description,
        "Delivers one signed synthetic prediction.succeeded event, synchronously. 422 when no webhook is configured. Costs 0."
      )
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Webhooks")
{}
