/**
 * Tracing. Every sampled request gets a server span (HttpMiddleware.tracer, applied by the
 * HTTP handler) with the route, status, request id, account id and credits charged; SQL
 * statements, ledger operations, job runs and webhook attempts are its children or their own traces.
 *
 * Spans are exported over OTLP/HTTP (JSON, Effect's own exporter) when
 * OTEL_EXPORTER_OTLP_ENDPOINT is set, together with the metrics; nothing leaves the process
 * when it is unset. Whatever tracer is in use, query strings and secret path segments are
 * scrubbed before a span records them: a rejected `?api_key=…` never lands in a trace.
 */
import { Config, Context, Duration, Effect, Layer, Option, References, Tracer } from "effect"
import { FetchHttpClient, Headers, HttpMiddleware, HttpTraceContext } from "effect/http"
import { OtlpExporter, OtlpMetrics, OtlpSerialization, OtlpTracer } from "effect/observability"
import { type PublicPath, PublicPaths } from "./Routes.js"

export const TracingConfig = Config.all({
  /** Base URL of an OTLP/HTTP collector (`/v1/traces` and `/v1/metrics` are appended). */
  endpoint: Config.option(Config.NonEmptyString("OTEL_EXPORTER_OTLP_ENDPOINT")),
  serviceName: Config.String("OTEL_SERVICE_NAME").pipe(Config.withDefault("hookline")),
  exportInterval: Config.Duration("OTEL_EXPORT_INTERVAL").pipe(Config.withDefault(Duration.seconds(5)))
})

/** Attribute names Hookline adds to the request span. */
export const SpanAttributes = {
  requestId: "hookline.request_id",
  accountId: "hookline.account_id",
  keyId: "hookline.key_id",
  creditsCharged: "hookline.credits_charged",
  operation: "hookline.operation"
} as const

/** The URL attributes HttpMiddleware.tracer and HttpClient record, made safe to export. */
const scrubAttribute = (publicPath: PublicPath, key: string, value: unknown): Option.Option<unknown> => {
  switch (key) {
    case "url.query":
      return Option.none()
    case "url.full": {
      if (typeof value !== "string") return Option.some(value)
      const url = URL.canParse(value) ? new URL(value) : null
      return Option.some(url === null ? publicPath(value) : `${url.protocol}//${url.host}${publicPath(url.pathname)}`)
    }
    case "url.path":
      return Option.some(typeof value === "string" ? publicPath(value) : value)
    default:
      return Option.some(value)
  }
}

/**
 * Wraps a tracer so that its spans never record query strings or secret path segments. Every
 * attribute, those given when a span starts included, goes through the span's setter.
 */
export const scrubbingTracer = (tracer: Tracer.Tracer, publicPath: PublicPath): Tracer.Tracer =>
  Tracer.make({
    span(options) {
      const span = tracer.span(options)
      // The span object belongs to the wrapped tracer (its exporter reads it); only the
      // attribute setter is intercepted.
      const record = span.attribute.bind(span)
      span.attribute = (key, value) => Option.match(scrubAttribute(publicPath, key, value), { onNone: () => {}, onSome: (safe) => record(key, safe) })
      return span
    },
    context: tracer.context
  })

const otlpExport = (endpoint: string, serviceName: string, exportInterval: Duration.Duration, publicPath: PublicPath) => {
  const base = endpoint.replace(/\/+$/, "")
  const resource = { serviceName }
  const tracer = Layer.effect(Tracer.Tracer, Effect.map(OtlpTracer.make({ url: `${base}/v1/traces`, resource, exportInterval }), (tracer) => scrubbingTracer(tracer, publicPath)))
  const metrics = Layer.effectDiscard(OtlpMetrics.make({ url: `${base}/v1/metrics`, resource, exportInterval }))
  return Layer.mergeAll(tracer, metrics).pipe(
    Layer.provide(OtlpExporter.layerFlusher),
    Layer.provide(OtlpSerialization.layerJson),
    Layer.provide(FetchHttpClient.layer)
  )
}

/**
 * The request span: named `http.server <METHOD>`, with the request's and response's headers
 * as attributes (the credential ones, `Headers.CurrentRedactedNames`, as "<redacted>").
 */
const serverSpans = Layer.mergeAll(
  Layer.succeed(HttpMiddleware.SpanNameGenerator, (request) => `http.server ${request.method}`),
  Layer.succeed(HttpMiddleware.TracerHeaderFilter, () => true)
)

/**
 * The tracer for the whole application: OTLP export when configured; otherwise the tracer in
 * place (a test's collector), scrubbed with the application's PublicPaths. Effect's own in-process tracer is left as it is: its
 * spans reach no one, and Effect skips the request span's attributes for it.
 */
export const TracingLive = Layer.unwrap(
  Effect.gen(function*() {
    const config = yield* TracingConfig
    const publicPath = yield* PublicPaths
    if (Option.isSome(config.endpoint)) return otlpExport(config.endpoint.value, config.serviceName, config.exportInterval, publicPath)
    const current = yield* Effect.tracer
    return current === Tracer.nativeTracer ? Layer.empty : Layer.succeed(Tracer.Tracer, scrubbingTracer(current, publicPath))
  })
).pipe(Layer.merge(serverSpans))

/**
 * `Effect.withSpan`, only in a fiber that traces. Effect.withSpan builds a span (a no-op one when
 * the tracer is off) and its finaliser on every call, about as much CPU as a whole statement
 * (bench/statement-cost.ts); an unsampled request pays nothing here.
 */
export const traced = (name: string, options?: Tracer.SpanOptions) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) => (fiber.getRef(References.TracerEnabled) ? Effect.withSpan(effect, name, options) : effect))

/** A function whose every call runs in a span named `name` when the fiber traces (see `traced`). */
export const tracedFn = <Args extends ReadonlyArray<unknown>, A, E, R>(name: string, f: (...args: Args) => Effect.Effect<A, E, R>) =>
(...args: Args): Effect.Effect<A, E, R> => traced(name)(f(...args))

/**
 * Sets an attribute on the request's server span, from anywhere inside the request (an inner
 * span such as Ledger.settle does not catch it). Outside a request it marks the current span.
 */
export const annotateRequestSpan = (key: string, value: unknown): Effect.Effect<void> =>
  Effect.withFiber((fiber) => {
    // Untraced (unsampled) requests carry no span: nothing to look up.
    if (!fiber.getRef(References.TracerEnabled)) return Effect.void
    const start = Context.getOrUndefined(fiber.context, Tracer.ParentSpan)
    let span = start
    while (span !== undefined && span._tag === "Span" && span.kind !== "server") {
      span = Option.getOrUndefined(span.parent)
    }
    const target = span?._tag === "Span" ? span : start?._tag === "Span" ? start : undefined
    target?.attribute(key, value)
    return Effect.void
  })

/**
 * The current span as a W3C `traceparent` value, to store beside work the request causes
 * (a prediction job), or null outside any span and in a fiber that does not trace (its spans
 * are no-ops, with no real ids).
 */
export const currentTraceParent: Effect.Effect<string | null> = Effect.withFiber((fiber) =>
  fiber.getRef(References.TracerEnabled)
    ? Effect.map(
      Effect.option(Effect.currentSpan),
      Option.match({
        onNone: () => null,
        onSome: (span) => HttpTraceContext.toHeaders(span).traceparent ?? null
      })
    )
    : Effect.succeed(null)
)

/**
 * Span options linking background work to the request that caused it: the job's span starts
 * its own trace and carries a link to the stored `traceparent` (none when it is absent or bad).
 */
export const linkedTo = (traceParent: string | null): ReadonlyArray<Tracer.SpanLink> => {
  if (traceParent === null) return []
  return Option.match(HttpTraceContext.w3c(Headers.fromRecordUnsafe({ traceparent: traceParent })), {
    onNone: () => [],
    onSome: (span) => [{ span, attributes: { "hookline.link": "caused_by_request" } }]
  })
}
