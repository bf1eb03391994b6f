import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { idempotent } from "../Idempotency/Http.js"
import { WebhookDeliveries } from "./Deliveries.js"
import { Webhooks } from "./Webhooks.js"

export const WebhooksHandlers = HttpApiBuilder.group(HooklineApi, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    const deliveries = yield* WebhookDeliveries
    return handlers
      .handle("get", () => Effect.flatMap(CurrentCaller, (caller) => webhooks.get(caller.accountId)))
      .handle("set", ({ payload }) => Effect.flatMap(CurrentCaller, (caller) => webhooks.set(caller.accountId, payload.url, payload.events)))
      .handle("disable", () => Effect.flatMap(CurrentCaller, (caller) => webhooks.disable(caller.accountId)))
      .handle("rotate", () => idempotent(Effect.flatMap(CurrentCaller, (caller) => webhooks.rotate(caller.accountId))))
      .handle("test", () => idempotent(Effect.flatMap(CurrentCaller, (caller) => webhooks.sendTest(caller.accountId))))
      .handle("deliveries", ({ urlParams }) => Effect.flatMap(CurrentCaller, (caller) => deliveries.list(caller.accountId, urlParams)))
      .handle("delivery", ({ path }) => Effect.flatMap(CurrentCaller, (caller) => deliveries.get(caller.accountId, path.id)))
      .handle("retryDelivery", ({ path }) => Effect.flatMap(CurrentCaller, (caller) => deliveries.retry(caller.accountId, path.id)))
  })
)
