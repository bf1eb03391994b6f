import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { SqlClient } from "effect/sql"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { answerInTransaction } from "../Idempotency/Headers.js"
import { idempotent } from "../Idempotency/Http.js"
import { orDieOnDb } from "../Sql.js"
import { WebhookDeliveries } from "./Deliveries.js"
import { Webhooks } from "./Webhooks.js"

export const WebhooksHandlers = HttpApiBuilder.group(HooklineApi, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    const deliveries = yield* WebhookDeliveries
    const sql = yield* SqlClient.SqlClient
    return handlers
      .handle("get", () => Effect.flatMap(CurrentCaller, (caller) => webhooks.get(caller.accountId)))
      .handle("set", ({ payload }) => Effect.flatMap(CurrentCaller, (caller) => webhooks.set(caller.accountId, payload.url, payload.events)))
      .handle("disable", () => Effect.flatMap(CurrentCaller, (caller) => webhooks.disable(caller.accountId)))
      .handle("rotate", () =>
        idempotent(Effect.flatMap(CurrentCaller, (caller) => webhooks.rotate(caller.accountId)).pipe(
          Effect.flatMap((rotated) => answerInTransaction(rotated)),
          sql.withTransaction,
          orDieOnDb
        )))
      // The send itself is an HTTP request no transaction can take back: only its answer is stored in one.
      .handle("test", () =>
        idempotent(Effect.flatMap(CurrentCaller, (caller) => webhooks.sendTest(caller.accountId)).pipe(
          Effect.flatMap((sent) => orDieOnDb(sql.withTransaction(answerInTransaction(sent))))
        )))
      .handle("deliveries", ({ query }) => Effect.flatMap(CurrentCaller, (caller) => deliveries.list(caller.accountId, query)))
      .handle("delivery", ({ params }) => Effect.flatMap(CurrentCaller, (caller) => deliveries.get(caller.accountId, params.id)))
      .handle("retryDelivery", ({ params }) => Effect.flatMap(CurrentCaller, (caller) => deliveries.retry(caller.accountId, params.id)))
      .handle("recoverDeliveries", ({ payload }) =>
        Effect.flatMap(CurrentCaller, (caller) => deliveries.recover(caller.accountId, payload.since)))
  })
)
