import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Option, Redacted } from "effect"
import { HooklineApi } from "../Api.js"
import { Auth } from "../Auth/Auth.js"
import { bearerToken } from "../Auth/Bearer.js"
import { Secrets } from "../Config.js"
import { InvalidApiKey, NotFound, RequestId } from "../Errors.js"
import { HookCatalog } from "../Hooks/HookCatalog.js"
import { importHooksFromRequest } from "../Hooks/Import.js"
import { idempotent } from "../Idempotency/Http.js"
import { walletOf } from "../Ledger/Api.js"
import { CreditHistory } from "../Ledger/History.js"
import { Ledger } from "../Ledger/Ledger.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { sameSecret } from "../Ids.js"
import { Usage } from "../Ledger/Usage.js"
import { Accounts } from "./Accounts.js"
import { AdminAuthentication } from "./Api.js"

export const AdminAuthenticationLive = Layer.effect(
  AdminAuthentication,
  Effect.gen(function*() {
    const secrets = yield* Secrets
    const rateLimits = yield* RateLimits
    return AdminAuthentication.of({
      adminToken: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          // With a real database and no ADMIN_TOKEN the admin API does not exist.
          if (secrets.adminToken === null) return yield* new NotFound({ message: "No route for this request." })
          const token = bearerToken(request.headers["authorization"])
          if (token === null || !sameSecret(token, Redacted.value(secrets.adminToken))) {
            // Counted with /v1's failures per client address: guessing the token is limited too.
            yield* rateLimits.failedAuthentication(Option.getOrElse(request.remoteAddress, () => "unknown"))
            return yield* new InvalidApiKey({ message: "Missing or invalid admin token." })
          }
        })
    })
  })
)

export const AdminHandlers = HttpApiBuilder.group(HooklineApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const accounts = yield* Accounts
    const auth = yield* Auth
    const ledger = yield* Ledger
    const catalog = yield* HookCatalog
    const history = yield* CreditHistory
    const usage = yield* Usage
    return handlers
      .handle("createAccount", ({ payload }) => idempotent(accounts.create(payload), payload))
      .handle("getAccount", ({ path }) => accounts.get(path.id))
      .handle("updateAccount", ({ path, payload }) => accounts.update(path.id, payload))
      .handle("createKey", ({ path, payload }) =>
        idempotent(accounts.get(path.id).pipe(Effect.zipRight(Effect.orDie(auth.createKey(path.id, payload.scopes)))), payload))
      .handle("revokeKey", ({ path }) =>
        auth.revokeKey(path.id).pipe(
          Effect.orDie,
          Effect.flatMap((found) =>
            found
              ? Effect.succeed({ object: "api_key" as const, id: path.id, revoked: true as const })
              : new NotFound({ message: `No API key ${path.id}.` })
          )
        ))
      .handle("grantCredits", ({ path, payload }) =>
        idempotent(
          Effect.gen(function*() {
            yield* accounts.get(path.id)
            const wallet = yield* ledger.grant(path.id, payload.bucket, payload.amount, {
              reason: payload.reason ?? null,
              referenceId: payload.reference ?? null,
              requestId: yield* RequestId
            })
            return walletOf(wallet)
          }),
          payload
        ))
      .handle("listTransactions", ({ path, urlParams }) =>
        // Reading the account (and its wallet) applies a rollover that is due, so it is listed.
        accounts.get(path.id).pipe(Effect.zipRight(history.list(path.id, urlParams, "admin.transactions"))))
      .handle("accountUsage", ({ path, urlParams }) =>
        accounts.get(path.id).pipe(Effect.zipRight(usage.summarise(path.id, urlParams))))
      .handle("putCategories", ({ payload }) => catalog.putCategories(payload))
      .handle("importHooks", () => importHooksFromRequest)
  })
).pipe(Layer.provide(AdminAuthenticationLive))
