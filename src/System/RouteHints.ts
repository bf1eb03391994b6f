/**
 * The message of a 404 for a request no route takes: the path as it may be logged (an upload
 * link's token is never echoed) and, when the path exists with other methods, which ones.
 */
import { publicPath, routeOf, unmatchedRoute } from "../Observability/Routes.js"

const methods = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const

export const noRouteMessage = (method: string, url: string): string => {
  const others = methods.filter((other) => other !== method && routeOf(other, url) !== unmatchedRoute)
  const path = publicPath(url)
  return others.length === 0
    ? `No route for ${method} ${path}.`
    : `No route for ${method} ${path}; this path takes ${others.join(" or ")}.`
}
