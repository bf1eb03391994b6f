/**
 * Tracing. Every request gets a server span (HttpMiddleware.tracer, inside HttpApiBuilder.serve)
 * with the route, status, request id, account id and credits charged; SQL statements, ledger
 * operations, job runs and webhook attempts are its children or their own traces.
 *
 * Spans are exported over OTLP/HTTP (JSON, Effect's own exporter) when
 * OTEL_EXPORTER_OTLP_ENDPOINT is set, together with the metrics; nothing leaves the process
 * when it is unset. Whatever tracer is in use, query strings and secret path segments are
 * scrubbed before a span records them: a rejected `?api_key=…` never lands in a trace.
 */
import { FetchHttpClient, Headers, HttpTraceContext } from "@effect/platform"
import * as OtlpMetrics from "@effect/opentelemetry/OtlpMetrics"
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import { Config, Context, Duration, Effect, FiberRef, Layer, Option, Tracer } from "effect"
import { publicPath } from "./Routes.js"

export const TracingConfig = Config.all({
  /** Base URL of an OTLP/HTTP collector (`/v1/traces` and `/v1/metrics` are appended). */
  endpoint: Config.option(Config.nonEmptyString("OTEL_EXPORTER_OTLP_ENDPOINT")),
  serviceName: Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("hookline")),
  exportInterval: Config.duration("OTEL_EXPORT_INTERVAL").pipe(Config.withDefault(Duration.seconds(5)))
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
const scrubAttribute = (key: string, value: unknown): Option.Option<unknown> => {
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

const scrubAttributes = (attributes: Record<string, unknown> | undefined) => {
  if (attributes === undefined) return undefined
  const scrubbed: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(attributes)) {
    Option.map(scrubAttribute(key, value), (safe) => {
      scrubbed[key] = safe
    })
  }
  return scrubbed
}

/** Wraps a tracer so that its spans never record query strings or secret path segments. */
export const scrubbingTracer = (tracer: Tracer.Tracer): Tracer.Tracer =>
  Tracer.make({
    span(name, parent, context, links, startTime, kind, options) {
      const span = tracer.span(name, parent, context, links, startTime, kind, {
        ...options,
        attributes: scrubAttributes(options?.attributes)
      })
      // The span object belongs to the wrapped tracer (its exporter reads it); only the
      // attribute setter is intercepted.
      const record = span.attribute.bind(span)
      span.attribute = (key, value) => Option.map(scrubAttribute(key, value), (safe) => record(key, safe))
      return span
    },
    context: (f, fiber) => tracer.context(f, fiber)
  })

const otlpExport = (endpoint: string, serviceName: string, exportInterval: Duration.Duration) => {
  const base = endpoint.replace(/\/+$/, "")
  const resource = { serviceName }
  const tracer = Layer.unwrapScoped(
    Effect.map(
      OtlpTracer.make({ url: `${base}/v1/traces`, resource, exportInterval }),
      (otlp) => Layer.setTracer(scrubbingTracer(otlp))
    )
  )
  const metrics = OtlpMetrics.layer({ url: `${base}/v1/metrics`, resource, exportInterval })
  return Layer.merge(tracer, metrics).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(FetchHttpClient.layer))
}

/**
 * The tracer for the whole application: OTLP export when configured; otherwise the tracer in
 * place (Effect's in-process one, or a test's collector), scrubbed either way.
 */
export const TracingLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* TracingConfig
    if (Option.isSome(config.endpoint)) return otlpExport(config.endpoint.value, config.serviceName, config.exportInterval)
    const current = yield* Effect.tracer
    return Layer.setTracer(scrubbingTracer(current))
  })
)

/**
 * Sets an attribute on the request's server span, from anywhere inside the request (an inner
 * span such as Ledger.settle does not catch it). Outside a request it marks the current span.
 */
/**
 * `Effect.withSpan`, only in a fiber that traces. Effect.withSpan builds a span (a no-op one when
 * the tracer is off) and its finaliser on every call, about as much CPU as a whole statement
 * (bench/statement-cost.ts); an unsampled request pays nothing here.
 */
export const traced = (name: string, options?: Tracer.SpanOptions) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => (fiber.getFiberRef(FiberRef.currentTracerEnabled) ? Effect.withSpan(effect, name, options) : effect))

/** A function whose every call runs in a span named `name` when the fiber traces (see `traced`). */
export const tracedFn = <Args extends ReadonlyArray<unknown>, A, E, R>(name: string, f: (...args: Args) => Effect.Effect<A, E, R>) =>
(...args: Args): Effect.Effect<A, E, R> => traced(name)(f(...args))

export const annotateRequestSpan = (key: string, value: unknown): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    // Untraced (unsampled) requests carry no span: nothing to look up.
    if (!fiber.getFiberRef(FiberRef.currentTracerEnabled)) return Effect.void
    const start = Option.getOrUndefined(Context.getOption(fiber.currentContext, Tracer.ParentSpan))
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
 * (a prediction job), or null outside any span.
 */
export const currentTraceParent: Effect.Effect<string | null> = Effect.map(
  Effect.option(Effect.currentSpan),
  Option.match({
    onNone: () => null,
    onSome: (span) => HttpTraceContext.toHeaders(span).traceparent ?? null
  })
)

/**
 * Span options linking background work to the request that caused it: the job's span starts
 * its own trace and carries a link to the stored `traceparent` (none when it is absent or bad).
 */
export const linkedTo = (traceParent: string | null): ReadonlyArray<Tracer.SpanLink> => {
  if (traceParent === null) return []
  return Option.match(HttpTraceContext.w3c(Headers.unsafeFromRecord({ traceparent: traceParent })), {
    onNone: () => [],
    onSome: (span) => [{ _tag: "SpanLink" as const, span, attributes: { "hookline.link": "caused_by_request" } }]
  })
}
