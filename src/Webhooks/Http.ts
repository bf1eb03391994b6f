import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { idempotent } from "../Idempotency/Idempotent.js"
import { Webhooks } from "./Webhooks.js"

export const WebhooksHandlers = HttpApiBuilder.group(HooklineApi, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    return handlers
      .handle("get", () => Effect.flatMap(CurrentCaller, (caller) => webhooks.get(caller.accountId)))
      .handle("set", ({ payload }) => Effect.flatMap(CurrentCaller, (caller) => webhooks.set(caller.accountId, payload.url)))
      .handle("disable", () => Effect.flatMap(CurrentCaller, (caller) => webhooks.disable(caller.accountId)))
      .handle("rotate", () => idempotent(Effect.flatMap(CurrentCaller, (caller) => webhooks.rotate(caller.accountId))))
      .handle("test", () => idempotent(Effect.flatMap(CurrentCaller, (caller) => webhooks.sendTest(caller.accountId))))
  })
)
