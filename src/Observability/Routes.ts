/**
 * Which route a request took, as the API declares it (`GET /v1/hooks/:id`), for metric labels,
 * access logs and spans: bounded label values, and no path segment that is a secret.
 */
import { declaredEndpoints } from "../ApiRoutes.js"

/** Path parameters that are credentials (the upload link's token): never logged, traced or labelled. */
const secretParams: ReadonlySet<string> = new Set(["token"])

/** Served by the server wiring beside the API (src/Http.ts), not declared as endpoints. */
const extraRoutes: ReadonlyArray<readonly [string, string]> = [
  ["GET", "/docs"],
  ["GET", "/openapi.json"]
]

interface CompiledRoute {
  readonly method: string
  readonly template: string
  readonly pattern: RegExp
  readonly params: ReadonlyArray<string>
  readonly hasSecret: boolean
  /** The literal part before the first secret parameter (`/uploads/`). */
  readonly secretPrefix: string | null
}

const compile = (method: string, template: string): CompiledRoute => {
  const params: Array<string> = []
  const source = template
    .split("/")
    .map((segment) => {
      if (segment.startsWith(":")) {
        params.push(segment.slice(1))
        return "([^/]+)"
      }
      return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
    })
    .join("/")
  const firstSecret = template.split("/").findIndex((segment) => secretParams.has(segment.slice(1)) && segment.startsWith(":"))
  return {
    method,
    template,
    pattern: new RegExp(`^${source}/?$`),
    params,
    hasSecret: firstSecret !== -1,
    secretPrefix: firstSecret === -1 ? null : template.split("/").slice(0, firstSecret).join("/") + "/"
  }
}

const declared = declaredEndpoints.map((endpoint) => [endpoint.method, endpoint.path] as const)

// Literal paths first, so /v1/hooks/search never counts as /v1/hooks/:id.
const routes: ReadonlyArray<CompiledRoute> = [...declared, ...extraRoutes]
  .map(([method, template]) => compile(method, template))
  .sort((a, b) => a.params.length - b.params.length)

/**
 * Probes and scrapes arrive every few seconds; their spans would drown the traces that matter,
 * so neither they nor the queries they run are traced (they are still counted and logged).
 */
export const untracedPaths: ReadonlySet<string> = new Set(["/healthz", "/readyz", "/metrics"])

/** The label for requests that match no route (bounded: the raw path is never a label). */
export const unmatchedRoute = "unmatched"

export const pathOnly = (url: string) => url.replace(/[?#].*$/s, "")

/** The route template `method` + `url` matched, or "unmatched". HEAD counts as GET, as in the router. */
export const routeOf = (method: string, url: string): string => {
  const path = pathOnly(url)
  const wanted = method === "HEAD" ? "GET" : method
  for (const route of routes) {
    if (route.method === wanted && route.pattern.test(path)) return route.template
  }
  return unmatchedRoute
}

/**
 * The path without its query string, with secret parameters replaced by their name
 * (`/uploads/:token`), safe for logs and traces. Matching ignores the method, so a wrong-method
 * request to an upload link is redacted too.
 */
export const publicPath = (url: string): string => {
  const path = pathOnly(url)
  for (const route of routes) {
    if (!route.hasSecret) continue
    const match = route.pattern.exec(path)
    if (match === null) continue
    let index = 0
    return route.template
      .split("/")
      .map((segment) => {
        if (!segment.startsWith(":")) return segment
        const value = match[++index]
        return secretParams.has(segment.slice(1)) ? segment : value
      })
      .join("/")
  }
  for (const route of routes) {
    if (route.secretPrefix !== null && path.startsWith(route.secretPrefix)) return `${route.secretPrefix}:redacted`
  }
  return path
}
