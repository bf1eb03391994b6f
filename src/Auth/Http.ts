/**
 * The bearer middleware, in the order decisions.md fixes: a key in the query → 401; missing,
 * malformed, unknown or revoked bearer key → 401; suspended → 403 account_suspended; no API
 * access or missing scope → 403 api_not_enabled; then the rate limit → 429. Input validation
 * and credit reserves come after, in the endpoint.
 */
import { HttpApp, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Context, Effect, Layer, Option } from "effect"
import { routeKey, routeTable } from "../ApiRoutes.js"
import { AccountSuspended, ApiNotEnabled, InvalidApiKey } from "../Errors.js"
import { annotateRequestSpan, SpanAttributes } from "../Observability/Tracing.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { ClientAddress } from "../System/Server.js"
import { AccessRule, type AccessRuleValue, Authentication } from "./Api.js"
import { Auth, apiKeyPattern } from "./Auth.js"
import { bearerToken } from "./Bearer.js"
import { hasApiAccess } from "./Plans.js"

/** Every endpoint's access rule, keyed by the route the router matched. */
const accessRules: ReadonlyMap<string, AccessRuleValue> = routeTable((endpoint) =>
  Context.getOption(endpoint.annotations, AccessRule)
)

const invalidKey = (message: string) => new InvalidApiKey({ message })

/**
 * The challenge every 401 carries (RFC 6750 §3): the scheme, and an error code when a
 * credential was sent but is not usable (none when the request simply carried none).
 */
const challenge = (error: "invalid_request" | "invalid_token" | null) => {
  const value = error === null ? `Bearer realm="hookline"` : `Bearer realm="hookline", error="${error}"`
  return HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, "www-authenticate", value))
  )
}

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const auth = yield* Auth
    const rateLimits = yield* RateLimits
    return Authentication.of({
      bearer: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const query = yield* HttpServerRequest.ParsedSearchParams
          const refuse = (message: string, error: "invalid_request" | "invalid_token" | null = null) =>
            Effect.flatMap(ClientAddress, (address) => rateLimits.failedAuthentication(address())).pipe(
              Effect.zipRight(challenge(error)),
              Effect.zipRight(invalidKey(message))
            )
          if ("api_key" in query || "key" in query) {
            return yield* refuse("API keys are not accepted in the query string; send Authorization: Bearer <key>.", "invalid_request")
          }
          const header = request.headers["authorization"]
          if (header === undefined || header === "") {
            return yield* refuse("Missing API key: send Authorization: Bearer <key>.")
          }
          const token = bearerToken(header)
          if (token === null) return yield* refuse("Malformed Authorization header: expected Authorization: Bearer hkl_live_<key>.")
          if (!apiKeyPattern.test(token)) {
            return yield* refuse("Malformed API key: expected Authorization: Bearer hkl_live_<key>.", "invalid_token")
          }
          const owner = yield* auth.findKey(token)
          if (Option.isNone(owner)) return yield* refuse("Unknown or revoked API key.", "invalid_token")
          const key = owner.value
          yield* annotateRequestSpan(SpanAttributes.accountId, key.accountId)
          yield* annotateRequestSpan(SpanAttributes.keyId, key.keyId)
          if (key.suspended) return yield* new AccountSuspended({ message: "This account is suspended." })

          const route = yield* HttpRouter.RouteContext
          const rule = accessRules.get(routeKey(route.route.method, route.route.path))
          if (rule === undefined) return yield* Effect.dieMessage(`No access rule for ${route.route.method} ${route.route.path}`)
          if (!rule.openWithoutApiAccess && !hasApiAccess(key.plan)) {
            return yield* new ApiNotEnabled({ message: `The ${key.plan} plan has no API access.` })
          }
          if (rule.scope !== null && !key.scopes.includes(rule.scope)) {
            return yield* new ApiNotEnabled({ message: `This key lacks the ${rule.scope} permission.` })
          }
          yield* rateLimits.perKey(key.keyId, key.plan)
          return { accountId: key.accountId, keyId: key.keyId, plan: key.plan }
        })
    })
  })
)
