/**
 * The routes as the app declares and registers them, and what each endpoint says of itself
 * (src/RouteTraits.ts), read back where the request path needs it:
 * - `RouteTraitsLive`, a route middleware: it runs once the router has matched the route
 *   (`HttpRouter.RouteContext`), so it knows the endpoint. A body read whole (a JSON payload) is
 *   bounded by Effect's own `MaxBodySize` at MAX_JSON_BODY_BYTES, counted while it streams and
 *   only read when the payload is decoded, after authentication; a `StreamedBody` route's handler
 *   bounds its body itself. On the metrics listener only `OnMetricsListener` routes exist;
 * - before routing, what must be known before the router runs (`traitsBeforeRouting`, matched
 *   as the router matches): whether a request may be traced (the server span starts first) and
 *   whether its body is streamed; and the path as logs and traces may show it (`publicPath`, also
 *   the span scrubber's: `PublicPathsLive`);
 * - the 404 hint: which methods a path takes, from every route the router was given (`RouteIndex`).
 */
import { ByteSize, Context, Effect, Layer, Option } from "effect"
import { HttpIncomingMessage, HttpRouter } from "effect/http"
import * as FindMyWay from "effect/http/FindMyWay"
import { routeKey, routeTable } from "../ApiRoutes.js"
import { ServerConfig } from "../Config.js"
import { RequestId } from "../Errors.js"
import { makePublicPath, pathOnly, PublicPaths } from "../Observability/Routes.js"
import { OnMetricsListener, SecretPathParams, StreamedBody, Untraced } from "../RouteTraits.js"
import { envelopeResponse } from "./Envelope.js"
import { type ListenerRole, ListenerRole as CurrentListener } from "./Listen.js"

export interface Traits {
  readonly streamedBody: boolean
  readonly secretParams: ReadonlyArray<string>
  readonly untraced: boolean
  readonly onMetricsListener: boolean
}

/** A route no endpoint declares (/docs, /openapi.json): a body read whole, traced, on the API port only. */
const undeclared: Traits = { streamedBody: false, secretParams: [], untraced: false, onMetricsListener: false }

/** Each declared endpoint's traits, by route key ("GET /metrics"). */
const traitsByRoute = routeTable((endpoint) =>
  Option.some<Traits>({
    streamedBody: Context.get(endpoint.annotations, StreamedBody),
    secretParams: Context.get(endpoint.annotations, SecretPathParams),
    untraced: Context.get(endpoint.annotations, Untraced),
    onMetricsListener: Context.get(endpoint.annotations, OnMetricsListener)
  })
)

const declaredRoutes = [...traitsByRoute].map(([key, traits]) => {
  const [method, path] = key.split(" ") as [string, FindMyWay.PathInput]
  return { method, path, traits }
})

const beforeRouting = FindMyWay.make<Traits>()
for (const { method, path, traits } of declaredRoutes) beforeRouting.on(method, path, traits)

/** The traits of the endpoint a request for `path` (no query string) will reach, found as the router finds it. */
export const traitsBeforeRouting = (method: string, path: string): Traits => beforeRouting.find(method, path)?.handler ?? undeclared

/** The path as logs, traces and error messages may show it: no query string, no secret segment. */
export const publicPath = makePublicPath(
  declaredRoutes.filter(({ traits }) => traits.secretParams.length > 0).map(({ path, traits }) => ({ path, secretParams: traits.secretParams }))
)

export const PublicPathsLive = Layer.succeed(PublicPaths, publicPath)

const metricsListenerRoutes = declaredRoutes.filter(({ traits }) => traits.onMetricsListener).map(({ method, path }) => `${method} ${path}`)
const onlyMetricsListenerRoutes = `Only ${metricsListenerRoutes.join(" and ")} is served on this port.`

/** Traits by the route object the router matched (one lookup by key per route, then by identity). */
const byRoute = new WeakMap<HttpRouter.Route<unknown, unknown>, Traits>()
const traitsOf = (route: HttpRouter.Route<unknown, unknown>): Traits => {
  let traits = byRoute.get(route)
  if (traits === undefined) {
    traits = traitsByRoute.get(routeKey(route.method, route.path)) ?? undeclared
    byRoute.set(route, traits)
  }
  return traits
}

/** The route middleware; provide `.layer` to the layers that register routes (src/Http.ts). */
export const RouteTraitsLive = HttpRouter.middleware(
  Effect.gen(function*() {
    const maxBodySize = ByteSize.bytes((yield* ServerConfig).maxJsonBodyBytes)
    return (httpEffect) =>
      Effect.withFiber((fiber) => {
        const traits = traitsOf(Context.getUnsafe(fiber.context, HttpRouter.RouteContext).route)
        if (!traits.onMetricsListener && fiber.getRef(CurrentListener) === "metrics") {
          return Effect.succeed(envelopeResponse("NotFound", onlyMetricsListenerRoutes, fiber.getRef(RequestId)))
        }
        return traits.streamedBody ? httpEffect : httpEffect.pipe(Effect.provideService(HttpIncomingMessage.MaxBodySize, maxBodySize))
      })
  })
)

const hintedMethods = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const

/** Every route (method and path) the router was given, matched as the router matches a request. */
export class RouteIndex extends Context.Service<RouteIndex, FindMyWay.Router<true>>()("hookline/RouteIndex") {
  static readonly layer = Layer.sync(RouteIndex, () => FindMyWay.make<true>())
}

/** The router, noting in the RouteIndex each route it is given; provide it to the layers that register routes. */
export const IndexedRouterLive = Layer.effect(
  HttpRouter.HttpRouter,
  Effect.gen(function*() {
    const router = yield* HttpRouter.HttpRouter
    const index = yield* RouteIndex
    const note = (method: string, path: FindMyWay.PathInput) => {
      if (method !== "*") index.on(method, path, true)
    }
    return HttpRouter.HttpRouter.of({
      ...router,
      add: (method, path, handler, options) => {
        note(method, path)
        return router.add(method, path, handler, options)
      },
      addAll: (routes) => {
        for (const route of routes) note(route.method, route.path)
        return router.addAll(routes)
      }
    })
  })
)

/** The message of a 404 for a request no route took: the path as it may be logged, and the methods the path takes. */
export const noRouteMessage = (index: FindMyWay.Router<true>, method: string, url: string, listener: ListenerRole): string => {
  if (listener === "metrics") return onlyMetricsListenerRoutes
  const path = pathOnly(url)
  const others = hintedMethods.filter((other) => other !== method && index.find(other, path) !== undefined)
  return others.length === 0
    ? `No route for ${method} ${publicPath(url)}.`
    : `No route for ${method} ${publicPath(url)}; this path takes ${others.join(" or ")}.`
}
