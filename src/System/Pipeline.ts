/**
 * The request pipeline: a global middleware of the router, so it wraps every request (routed
 * or not) and can still change the answer. In order:
 *
 * - the request id: the incoming X-Request-Id when it is a safe token, else a new one; every
 *   answer repeats it, every log line of the request carries it;
 * - the client address goes on the request (`remoteAddress`, read by `clientAddressOf`), so the
 *   failed-authentication limit counts per real client: the peer Bun saw (src/System/Server.ts),
 *   or behind a trusted proxy the address it forwarded (src/System/ClientAddress.ts);
 * - admission: once shutdown starts, 503 `service_unavailable` with Retry-After and
 *   Connection: close; an admitted request runs as one of the gate's fibers, which the
 *   shutdown interrupts when the grace period ends (src/System/Shutdown.ts);
 * - the request-head limit (431), control characters in the path (404); a body's limit is the
 *   route's, applied once the route is known (src/System/Routes.ts);
 * - failures no endpoint answered become the envelope (src/System/Envelope.ts);
 * - then the request metrics and the access log (with the client address), labelled with the
 *   route template the router matched, and for a request that was not sampled, the
 *   after-the-fact span of a 5xx or a slow one.
 */
import { Config, Context, Effect, Exit, LogLevel, Option, References, type Types } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { type ErrorTag, RequestId } from "../Errors.js"
import { newId } from "../Ids.js"
import { recordRequestNow } from "../Observability/Metrics.js"
import { pathOnly, unmatchedRoute } from "../Observability/Routes.js"
import { Sampling } from "../Observability/Sampling.js"
import { annotateRequestSpan, SpanAttributes } from "../Observability/Tracing.js"
import { ClientAddressConfig, makeClientAddress } from "./ClientAddress.js"
import { answerCause, envelopeResponse, UnavailableRetryAfter } from "./Envelope.js"
import { HeaderLimitConfig, hasControlCharacterInPath, requestHeadBytesAtMost } from "./InputGuards.js"
import { ListenerRole } from "./Listen.js"
import { noRouteMessage, publicPath, RouteIndex } from "./Routes.js"
import { ClientAddress } from "./Server.js"
import { ShutdownGate } from "./Shutdown.js"

const incomingRequestId = /^[A-Za-z0-9_.:-]{1,128}$/

const PipelineConfig = Config.all({
  headLimit: HeaderLimitConfig,
  clientAddress: ClientAddressConfig,
  retryAfter: UnavailableRetryAfter
})

/** An answer the pipeline gives itself, in the contract's envelope (a 503 with the one Retry-After). */
const refusal = (error: ErrorTag, message: string, requestId: string, close: boolean, retryAfter: string) =>
  envelopeResponse(error, message, requestId, {
    ...(close ? { "connection": "close" } : {}),
    ...(error === "ServiceUnavailable" ? { "retry-after": retryAfter } : {})
  })

type App = Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled>

export const RequestPipelineLive = HttpRouter.middleware(
  Effect.gen(function*() {
    const gate = yield* ShutdownGate
    const sampling = yield* Sampling
    const routes = yield* RouteIndex
    const { clientAddress, headLimit, retryAfter } = yield* PipelineConfig
    const clientOf = makeClientAddress(clientAddress)

    /** The refusals that come before routing, or null when the request may go on. */
    const guard = (request: HttpServerRequest.HttpServerRequest, path: string, requestId: string) => {
      if (!requestHeadBytesAtMost(request.method, request.url, request.headers, headLimit)) {
        return refusal("HeadersTooLarge", `The request line and headers are larger than ${headLimit} bytes.`, requestId, true, retryAfter)
      }
      if (hasControlCharacterInPath(path)) {
        return refusal("NotFound", "No resource has a path with control characters or broken percent-encoding.", requestId, false, retryAfter)
      }
      return null
    }

    return (app: App): App =>
      Effect.withFiber((fiber) => {
        const startedAt = Date.now()
        const started = performance.now()
        const original = Context.getUnsafe(fiber.context, HttpServerRequest.HttpServerRequest)
        const incoming = original.headers["x-request-id"]
        const requestId = incoming !== undefined && incomingRequestId.test(incoming) ? incoming : newId("req")
        const client = clientOf(fiber.getRef(ClientAddress), original.headers)
        const request = original.modify({ remoteAddress: Option.some(client) })
        const path = pathOnly(request.url)
        let route = unmatchedRoute

        let answer: Effect.Effect<HttpServerResponse.HttpServerResponse, Types.unhandled>
        if (!gate.enter(fiber)) {
          answer = Effect.succeed(refusal("ServiceUnavailable", "The server is shutting down; retry the request.", requestId, true, retryAfter))
        } else {
          const refused = guard(request, path, requestId)
          answer = refused !== null ? Effect.succeed(refused) : annotateRequestSpan(SpanAttributes.requestId, requestId).pipe(
            Effect.andThen(app),
            // The router leaves the route it matched in the fiber's context.
            Effect.ensuring(Effect.sync(() => {
              route = Context.getOrUndefined(fiber.context, HttpRouter.RouteContext)?.route.path ?? unmatchedRoute
            })),
            Effect.catchCause((cause) =>
              answerCause(cause, requestId, () => noRouteMessage(routes, request.method, request.url, fiber.getRef(ListenerRole)))
            ),
            Effect.provideService(HttpServerRequest.HttpServerRequest, request)
          )
        }
        return answer.pipe(
          Effect.map((response) => HttpServerResponse.setHeader(response, "x-request-id", requestId)),
          Effect.onExit((exit) => {
            const status = Exit.isSuccess(exit) ? exit.value.status : 500
            const durationMs = performance.now() - started
            recordRequestNow(route, request.method, status, durationMs / 1000)
            if (!fiber.getRef(References.TracerEnabled)) {
              sampling.summarize({ requestId, method: request.method, route, status, startedAt, durationMs })
            }
            // Below the log level the access line is not even built.
            if (LogLevel.isGreaterThan(fiber.getRef(References.MinimumLogLevel), "Info")) return Effect.void
            return Effect.logInfo("request").pipe(Effect.annotateLogs({
              method: request.method,
              route,
              path: publicPath(request.url),
              status,
              duration_ms: Math.round(durationMs * 10) / 10,
              client
            }))
          }),
          Effect.provideService(RequestId, requestId)
        )
      })
  }),
  { global: true }
)
