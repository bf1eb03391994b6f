/**
 * Paths as they may be logged, traced and labelled: no query string, and no path segment that
 * is a secret. Which route a request took is the router's (`HttpRouter.RouteContext`, the
 * `http.route` span attribute); this file only knows which templates carry a credential.
 */

/** Path parameters that are credentials (the upload link's token): never logged, traced or labelled. */
const secretParams: ReadonlySet<string> = new Set(["token"])

/**
 * The route templates whose path carries a credential (src/Predictions/Api.ts, the upload link).
 * Listed here rather than read from the API's declaration: tracing sits below every module, the
 * API above them all.
 */
const secretTemplates: ReadonlyArray<string> = ["/uploads/:token"]

interface SecretRoute {
  readonly template: ReadonlyArray<string>
  /** The literal part before the first secret parameter (`/uploads/`). */
  readonly prefix: string
}

const isSecretSegment = (segment: string) => segment.startsWith(":") && secretParams.has(segment.slice(1))

const secretRoutes: ReadonlyArray<SecretRoute> = secretTemplates
  .map((path) => path.split("/"))
  .map((template) => ({ template, prefix: template.slice(0, template.findIndex(isSecretSegment)).join("/") + "/" }))

/**
 * Probes and scrapes arrive every few seconds; their spans would drown the traces that matter,
 * so neither they nor the queries they run are traced (they are still counted and logged).
 */
export const untracedPaths: ReadonlySet<string> = new Set(["/healthz", "/readyz", "/metrics"])

/** The route label of a request no route took (bounded: the raw path is never a label). */
export const unmatchedRoute = "unmatched"

export const pathOnly = (url: string) => url.replace(/[?#].*$/s, "")

/** The segments of `path` as `template` (`:name` matches one non-empty segment; a trailing slash is ignored). */
const matches = (template: ReadonlyArray<string>, segments: ReadonlyArray<string>) =>
  template.length === segments.length &&
  template.every((part, i) => (part.startsWith(":") ? segments[i] !== "" : part === segments[i]))

/**
 * The path without its query string, with secret parameters replaced by their name
 * (`/uploads/:token`), safe for logs and traces. A path under a secret route's prefix that
 * matches no template (`/uploads/x/y`) is cut at the prefix (`/uploads/:redacted`).
 */
export const publicPath = (url: string): string => {
  const path = pathOnly(url)
  const segments = (path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path).split("/")
  for (const route of secretRoutes) {
    if (!matches(route.template, segments)) continue
    return route.template.map((part, i) => (part.startsWith(":") && !isSecretSegment(part) ? segments[i] : part)).join("/")
  }
  for (const route of secretRoutes) {
    if (path.startsWith(route.prefix)) return `${route.prefix}:redacted`
  }
  return path
}
