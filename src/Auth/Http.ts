/**
 * The bearer middleware, in the order docs/behaviour.md fixes: a key in the query → 401; missing,
 * malformed, unknown or revoked bearer key → 401; suspended → 403 account_suspended; no API
 * access or missing scope → 403 api_not_enabled; then the rate limit → 429. Input validation
 * and credit reserves come after, in the endpoint (the middleware wraps the decoding).
 */
import { Context, Effect, Layer, Option } from "effect"
import { HttpEffect, HttpServerRequest, HttpServerResponse } from "effect/http"
import { AccountSuspended, ApiNotEnabled, InvalidApiKey } from "../Errors.js"
import { annotateRequestSpan, SpanAttributes } from "../Observability/Tracing.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { AccessRule, Authentication, CurrentCaller } from "./Api.js"
import { apiKeyPattern, Auth } from "./Auth.js"
import { bearerToken } from "./Bearer.js"
import { hasApiAccess, rateTierOf } from "./Plans.js"

/**
 * The challenge every 401 carries (RFC 6750 §3): the scheme, and an error code when a
 * credential was sent but is not usable (none when the request simply carried none).
 */
const challenge = (error: "invalid_request" | "invalid_token" | null) => {
  const value = error === null ? `Bearer realm="hookline"` : `Bearer realm="hookline", error="${error}"`
  return HttpEffect.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, "www-authenticate", value))
  )
}

/** The client's address as the server saw it (src/System/Server.ts puts it on the request). */
export const clientAddressOf = (request: HttpServerRequest.HttpServerRequest): string =>
  Option.getOrElse(request.remoteAddress, () => "unknown")

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const auth = yield* Auth
    const rateLimits = yield* RateLimits
    return Authentication.of({
      bearer: (httpEffect, { endpoint }) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const query = yield* HttpServerRequest.ParsedSearchParams
          const refuse = (message: string, error: "invalid_request" | "invalid_token" | null = null) =>
            rateLimits.failedAuthentication(clientAddressOf(request)).pipe(
              Effect.andThen(challenge(error)),
              Effect.andThen(Effect.fail(new InvalidApiKey({ message })))
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

          const rule = Context.getOrUndefined(endpoint.annotations, AccessRule)
          if (rule === undefined) return yield* Effect.die(`No access rule for ${endpoint.method} ${endpoint.path}`)
          if (!rule.openWithoutApiAccess && !hasApiAccess(key.plan)) {
            return yield* new ApiNotEnabled({ message: `The ${key.plan} plan has no API access.` })
          }
          if (rule.scope !== null && !key.scopes.includes(rule.scope)) {
            return yield* new ApiNotEnabled({ message: `This key lacks the ${rule.scope} permission.` })
          }
          yield* rateLimits.perKey(key.keyId, rateTierOf(key.plan))
          return yield* Effect.provideService(httpEffect, CurrentCaller, {
            accountId: key.accountId,
            keyId: key.keyId,
            plan: key.plan
          })
        })
    })
  })
)
