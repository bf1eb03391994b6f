/**
 * Paths as they may be logged, traced and labelled: no query string, and no path segment that
 * is a secret. Which route a request took is the router's (`HttpRouter.RouteContext`, the
 * `http.route` span attribute); which path parameters are secrets is said on the endpoints
 * (src/RouteTraits.ts `SecretPathParams`) and handed in as `PublicPath`: tracing sits below every
 * module, the API above them all.
 */
import { Context } from "effect"

/** The route label of a request no route took (bounded: the raw path is never a label). */
export const unmatchedRoute = "unmatched"

export const pathOnly = (url: string) => url.replace(/[?#].*$/s, "")

/** A route template (`/uploads/:token`) and the names of its parameters that are credentials. */
export interface SecretRoute {
  readonly path: string
  readonly secretParams: ReadonlyArray<string>
}

/** The path without its query string and with every secret segment replaced: safe for logs and traces. */
export type PublicPath = (url: string) => string

/** The application's PublicPath (built from its API), which the tracer scrubs span attributes with. */
export class PublicPaths extends Context.Service<PublicPaths, PublicPath>()("hookline/PublicPaths") {}

/** The segments of `path` as `template` (`:name` matches one non-empty segment; a trailing slash is ignored). */
const matches = (template: ReadonlyArray<string>, segments: ReadonlyArray<string>) =>
  template.length === segments.length &&
  template.every((part, i) => (part.startsWith(":") ? segments[i] !== "" : part === segments[i]))

/**
 * The PublicPath of these routes: secret parameters replaced by their name (`/uploads/:token`).
 * A path under a secret route's prefix (the literal part before its first secret parameter,
 * `/uploads/`) that matches no template (`/uploads/x/y`) is cut at the prefix (`/uploads/:redacted`).
 */
export const makePublicPath = (routes: ReadonlyArray<SecretRoute>): PublicPath => {
  const secretRoutes = routes.map(({ path, secretParams }) => {
    const template = path.split("/")
    const isSecret = (part: string) => part.startsWith(":") && secretParams.includes(part.slice(1))
    return { template, isSecret, prefix: template.slice(0, template.findIndex(isSecret)).join("/") + "/" }
  })
  return (url) => {
    const path = pathOnly(url)
    if (secretRoutes.length === 0) return path
    const segments = (path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path).split("/")
    for (const route of secretRoutes) {
      if (!matches(route.template, segments)) continue
      return route.template.map((part, i) => (part.startsWith(":") && !route.isSecret(part) ? segments[i] : part)).join("/")
    }
    for (const route of secretRoutes) {
      if (path.startsWith(route.prefix)) return `${route.prefix}:redacted`
    }
    return path
  }
}
