/**
 * Who may read /metrics. It is not public: on the API port GET /metrics answers only a request
 * with `Authorization: Bearer <METRICS_TOKEN>` (401 otherwise, counted with the failed
 * authentications of its address), and does not exist (404) while METRICS_TOKEN is unset.
 * METRICS_PORT adds a listener of its own (on METRICS_HOST, loopback by default) that serves
 * only GET /metrics, for a scraper on a private network; it asks for the token too when one is set.
 */
import { Effect, Layer, Option, Redacted } from "effect"
import { HttpServerRequest } from "effect/http"
import { bearerToken } from "../Auth/Bearer.js"
import { clientAddressOf } from "../Auth/Http.js"
import { InvalidApiKey, NotFound } from "../Errors.js"
import { sameSecret } from "../Ids.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { Metrics, type MetricsConfig, prometheusContentType } from "../Observability/Metrics.js"
import { webEnvelope } from "./Envelope.js"

const tokenOf = (config: MetricsConfig) => Option.filter(config.token, (token) => Redacted.value(token) !== "")

const bearerMatches = (header: string | null | undefined, token: Redacted.Redacted<string>) => {
  const given = bearerToken(header)
  return given !== null && sameSecret(given, Redacted.value(token))
}

const tokenRefused = "Missing or invalid metrics token: send Authorization: Bearer <METRICS_TOKEN>."

/** The check the API port's GET /metrics runs before scraping. */
export const checkMetricsAccess = Effect.gen(function*() {
  const metrics = yield* Metrics
  const token = tokenOf(metrics.config)
  if (Option.isNone(token)) return yield* new NotFound({ message: "No route for GET /metrics." })
  const request = yield* HttpServerRequest.HttpServerRequest
  if (bearerMatches(request.headers["authorization"], token.value)) return
  yield* (yield* RateLimits).failedAuthentication(clientAddressOf(request))
  return yield* new InvalidApiKey({ message: tokenRefused })
})

/** The separate metrics listener, when METRICS_PORT is set; stopped with the application. */
export const MetricsListenerLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const metrics = yield* Metrics
    const { port, host } = metrics.config
    if (Option.isNone(port)) return
    const token = tokenOf(metrics.config)
    const runScrape = Effect.runPromiseWith(yield* Effect.context<never>())
    const server = yield* Effect.acquireRelease(
      Effect.sync(() =>
        Bun.serve({
          port: port.value,
          hostname: host,
          fetch: async (request) => {
            if (request.method !== "GET" || new URL(request.url).pathname !== "/metrics") {
              return webEnvelope("NotFound", "Only GET /metrics is served on this port.")
            }
            if (Option.isSome(token) && !bearerMatches(request.headers.get("authorization"), token.value)) {
              return webEnvelope("InvalidApiKey", tokenRefused)
            }
            return new Response(await runScrape(metrics.scrape), { headers: { "content-type": prometheusContentType } })
          }
        })
      ),
      (server) => Effect.promise(() => server.stop(true))
    )
    yield* Effect.logInfo("metrics listener started").pipe(Effect.annotateLogs({ address: `http://${host}:${server.port}/metrics` }))
  })
)
