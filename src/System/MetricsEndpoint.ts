/**
 * Who may read /metrics. It is not public: on the API port GET /metrics answers only a request
 * with `Authorization: Bearer <METRICS_TOKEN>`, and does not exist (404) while METRICS_TOKEN is
 * unset. METRICS_PORT adds a listener of its own (on METRICS_HOST, loopback by default) for a
 * scraper on a private network: the same app and request pipeline (request id, access log,
 * metrics, admission), where only the routes annotated `OnMetricsListener` exist (GET /metrics);
 * there the token is asked for when one is set. A token refused on either listener counts
 * toward its client's failed authentications (RATE_LIMIT_FAILED_AUTH_PER_MINUTE), as an API key does.
 */
import { Effect, Layer, Option, Redacted } from "effect"
import { HttpServerRequest } from "effect/http"
import { bearerToken } from "../Auth/Bearer.js"
import { clientAddressOf } from "../Auth/Http.js"
import { InvalidApiKey, NotFound } from "../Errors.js"
import { sameSecret } from "../Ids.js"
import { MetricsConfig } from "../Observability/Metrics.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { ListenerRole } from "./Listen.js"
import { HttpListeners } from "./Server.js"

const tokenRefused = "Missing or invalid metrics token: send Authorization: Bearer <METRICS_TOKEN>."

/**
 * The check GET /metrics runs before scraping, on whichever listener the request came in on;
 * METRICS_TOKEN is read once, when the handlers are built.
 */
export const metricsAccessCheck = Effect.map(MetricsConfig, (config) => {
  const token = Option.filter(config.token, (token) => Redacted.value(token) !== "")
  return Effect.gen(function*() {
    if (Option.isNone(token)) {
      if ((yield* ListenerRole) === "metrics") return
      return yield* new NotFound({ message: "No route for GET /metrics." })
    }
    const request = yield* HttpServerRequest.HttpServerRequest
    const given = bearerToken(request.headers["authorization"])
    if (given !== null && sameSecret(given, Redacted.value(token.value))) return
    yield* (yield* RateLimits).failedAuthentication(clientAddressOf(request))
    return yield* new InvalidApiKey({ message: tokenRefused })
  })
})

/** The metrics listener, when METRICS_PORT is set; stopped with the server. */
export const MetricsListenerLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const { port, host } = yield* MetricsConfig
    if (Option.isNone(port)) return
    const listening = yield* (yield* HttpListeners).listen({ port: port.value, hostname: host, role: "metrics" })
    yield* Effect.logInfo("metrics listener started").pipe(Effect.annotateLogs({ address: `http://${host}:${listening}/metrics` }))
  })
)
