/**
 * The message of a 404 for a request no route takes: the path as it may be logged (an upload
 * link's token is never echoed) and, when the path exists with other methods, which ones,
 * found as the router finds routes (the same FindMyWay matcher, over the declared endpoints).
 */
import * as FindMyWay from "effect/http/FindMyWay"
import { declaredEndpoints } from "../ApiRoutes.js"
import { pathOnly, publicPath } from "../Observability/Routes.js"

const methods = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const

/** Served beside the API (src/Http.ts), not declared as endpoints. */
const extraRoutes: ReadonlyArray<readonly [string, string]> = [["GET", "/docs"], ["GET", "/openapi.json"]]

const matcher = FindMyWay.make<true>()
for (const [method, path] of [...declaredEndpoints.map((e) => [e.method, e.path] as const), ...extraRoutes]) {
  matcher.on(method, path as FindMyWay.PathInput, true)
}

export const noRouteMessage = (method: string, url: string): string => {
  const path = pathOnly(url)
  const others = methods.filter((other) => other !== method && matcher.find(other, path) !== undefined)
  return others.length === 0
    ? `No route for ${method} ${publicPath(url)}.`
    : `No route for ${method} ${publicPath(url)}; this path takes ${others.join(" or ")}.`
}
