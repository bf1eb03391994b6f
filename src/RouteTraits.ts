/**
 * What the request path needs to know of a route, said on its endpoint in the API
 * (`HttpApiEndpoint.annotate(StreamedBody, true)`) and read back per route by src/System/Routes.ts:
 * the body limit, redaction of secrets in the path, tracing, and which listener serves it.
 * A leaf: every room's Api.ts may annotate its endpoints with these.
 */
import { Context } from "effect"

/**
 * The handler reads the body itself, as a stream, under a limit of its own (the upload, the
 * import); every other route's body is read whole and bounded by MAX_JSON_BODY_BYTES.
 */
export const StreamedBody = Context.Reference<boolean>("hookline/route/StreamedBody", { defaultValue: () => false })

/** Path parameters that are credentials (the upload link's token): never logged, traced, labelled or echoed. */
export const SecretPathParams = Context.Reference<ReadonlyArray<string>>("hookline/route/SecretPathParams", {
  defaultValue: () => []
})

/**
 * Never sampled for tracing: probes and scrapes arrive every few seconds and their spans would
 * drown the traces that matter (they are still counted and logged).
 */
export const Untraced = Context.Reference<boolean>("hookline/route/Untraced", { defaultValue: () => false })

/** Also served on the metrics listener (METRICS_PORT), which serves nothing else. */
export const OnMetricsListener = Context.Reference<boolean>("hookline/route/OnMetricsListener", { defaultValue: () => false })
