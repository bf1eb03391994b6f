import { Effect, Layer, Option, Redacted } from "effect"
import { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { HooklineApi } from "../Api.js"
import { Auth } from "../Auth/Auth.js"
import { bearerToken } from "../Auth/Bearer.js"
import { clientAddressOf } from "../Auth/Http.js"
import { Secrets } from "../Config.js"
import { InvalidApiKey, NotFound, RequestId } from "../Errors.js"
import { CatalogImport } from "../Hooks/CatalogImport.js"
import { HookCatalog } from "../Hooks/HookCatalog.js"
import { importHooksFromRequest } from "../Hooks/Import.js"
import { idempotent } from "../Idempotency/Http.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { sameSecret } from "../Ids.js"
import { KeyBudgets } from "../Ledger/Budgets.js"
import { WebhookDeliveries } from "../Webhooks/Deliveries.js"
import { Accounts } from "./Accounts.js"
import { AdminAuthentication } from "./Api.js"

/**
 * The admin token, read from the raw Authorization header (the framework's bearer credential
 * does not tell a missing header from an empty token), compared in constant time.
 */
export const AdminAuthenticationLive = Layer.effect(
  AdminAuthentication,
  Effect.gen(function*() {
    const secrets = yield* Secrets
    const rateLimits = yield* RateLimits
    return AdminAuthentication.of({
      adminToken: (httpEffect) =>
        Effect.gen(function*() {
          // With a real database and no ADMIN_TOKEN the admin API does not exist.
          if (secrets.adminToken === null) return yield* new NotFound({ message: "No route for this request." })
          const request = yield* HttpServerRequest.HttpServerRequest
          const token = bearerToken(request.headers["authorization"])
          if (token === null || !sameSecret(token, Redacted.value(secrets.adminToken))) {
            // Counted with /v1's failures per client address: guessing the token is limited too.
            yield* rateLimits.failedAuthentication(clientAddressOf(request))
            return yield* new InvalidApiKey({ message: "Missing or invalid admin token." })
          }
          return yield* httpEffect
        })
    })
  })
)

export const AdminHandlers = HttpApiBuilder.group(HooklineApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const accounts = yield* Accounts
    const auth = yield* Auth
    const catalog = yield* HookCatalog
    const catalogImport = yield* CatalogImport
    const budgets = yield* KeyBudgets
    const deliveries = yield* WebhookDeliveries
    return handlers
      .handle("createAccount", ({ payload }) => idempotent(accounts.create(payload), payload))
      .handle("getAccount", ({ params }) => accounts.get(params.id))
      .handle("updateAccount", ({ params, payload }) => accounts.update(params.id, payload))
      .handle("createKey", ({ params, payload }) => idempotent(accounts.createKey(params.id, payload.scopes, payload.spend_limit), payload))
      .handle("updateKey", ({ params, payload }) =>
        budgets.setLimit(params.id, payload.spend_limit).pipe(
          Effect.flatMap(Option.match({
            onNone: () => Effect.fail(new NotFound({ message: `No API key ${params.id}.` })),
            onSome: Effect.succeed
          }))
        ))
      .handle("revokeKey", ({ params }) =>
        auth.revokeKey(params.id).pipe(
          Effect.orDie,
          Effect.flatMap((found) =>
            found
              ? Effect.succeed({ object: "api_key" as const, id: params.id, revoked: true as const })
              : Effect.fail(new NotFound({ message: `No API key ${params.id}.` }))
          )
        ))
      .handle("grantCredits", ({ params, payload }) =>
        idempotent(
          Effect.flatMap(RequestId, (requestId) =>
            accounts.grant(params.id, {
              bucket: payload.bucket,
              amount: payload.amount,
              expiresAt: payload.expires_at ?? null,
              reason: payload.reason ?? null,
              referenceId: payload.reference ?? null,
              requestId
            })),
          payload
        ))
      .handle("listTransactions", ({ params, query }) => accounts.transactions(params.id, query))
      .handle("accountUsage", ({ params, query }) => accounts.usage(params.id, query))
      .handle("recoverDeliveries", ({ params, payload }) =>
        Effect.andThen(accounts.get(params.id), deliveries.recover(params.id, payload.since)))
      .handle("putCategories", ({ payload }) => catalog.putCategories(payload))
      .handle("importHooks", () => Effect.provideService(importHooksFromRequest, CatalogImport, catalogImport))
  })
).pipe(Layer.provide([AdminAuthenticationLive, CatalogImport.layer]))
