/**
 * One place that watches every request: the access log line, the request metrics and the
 * request id on the server span. It runs inside the request-id middleware (src/Http.ts), so
 * its log line carries `request_id` like every other line logged during the request.
 *
 * The access log names the route template and a path with secrets removed (no query string,
 * no upload token); it never logs headers, so no API key can reach it.
 */
import { HttpMiddleware, HttpServerError, HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"
import { RequestId } from "../Errors.js"
import { recordRequest } from "./Metrics.js"
import { pathOnly, publicPath, routeOf, untracedPaths } from "./Routes.js"
import { annotateRequestSpan, SpanAttributes } from "./Tracing.js"

export const observeRequests = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const requestId = yield* RequestId
    const route = routeOf(request.method, request.url)
    yield* annotateRequestSpan(SpanAttributes.requestId, requestId)
    const started = performance.now()
    const untraced = untracedPaths.has(pathOnly(request.url))
    return yield* (untraced ? Effect.withTracerEnabled(app, false) : app).pipe(
      Effect.onExit((exit) => {
        const status = HttpServerError.exitResponse(exit).status
        const elapsedMs = performance.now() - started
        return Effect.zipRight(
          recordRequest(route, request.method, status, elapsedMs / 1000),
          Effect.logInfo("request").pipe(
            Effect.annotateLogs({
              method: request.method,
              route,
              path: publicPath(request.url),
              status,
              duration_ms: Math.round(elapsedMs * 10) / 10
            })
          )
        )
      })
    )
  })
)
