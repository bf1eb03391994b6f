/**
 * Which requests are traced. Spans cost CPU on every request that makes them, so only a
 * sample does (OpenTelemetry's standard settings):
 *
 * - OTEL_TRACES_SAMPLER: `parentbased_traceidratio` (default), `traceidratio`, `always_on`,
 *   `always_off`, `parentbased_always_on`, `parentbased_always_off`. "parentbased" follows the
 *   sampled flag of an incoming W3C `traceparent`, so a caller's trace is never cut.
 * - OTEL_TRACES_SAMPLER_ARG: the ratio for the `*traceidratio` samplers (default 0.01, 1 %).
 *
 * A request that was not sampled runs with `untracedReferences` in its context: the tracer off
 * (no span objects, no SQL spans) and the server span skipped. If it ends with a 5xx or takes
 * longer than TRACES_SLOW_REQUEST (default 500 ms), one span is still recorded for it after the
 * fact: the route, status, duration and request id, so every error and every slow request is
 * in the traces. Routes annotated `Untraced` (probes and scrapes, src/RouteTraits.ts) are not
 * offered to the sampler at all (the adapter asks, src/System/Server.ts).
 */
import { Config, Context, Duration, Effect, Exit, Layer, Option, References, Schema, SchemaIssue } from "effect"
import { Headers, HttpMiddleware, HttpTraceContext } from "effect/http"
import { SpanAttributes } from "./Tracing.js"

const samplers = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio"
] as const
type SamplerName = typeof samplers[number]

/** A setting that is present but unreadable: the boot fails with this message. */
const invalid = (message: string) =>
  Effect.fail(new Config.ConfigError(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message }))))

export const SamplingConfig = Config.all({
  sampler: Config.String("OTEL_TRACES_SAMPLER").pipe(
    Config.withDefault("parentbased_traceidratio"),
    Config.mapEffect((name) => {
      const found = samplers.find((known) => known === name.toLowerCase())
      return found === undefined ? invalid(`OTEL_TRACES_SAMPLER must be one of ${samplers.join(", ")}`) : Effect.succeed<SamplerName>(found)
    })
  ),
  ratio: Config.Number("OTEL_TRACES_SAMPLER_ARG").pipe(
    Config.withDefault(0.01),
    Config.mapEffect((ratio) => (ratio >= 0 && ratio <= 1 ? Effect.succeed(ratio) : invalid("OTEL_TRACES_SAMPLER_ARG must be between 0 and 1")))
  ),
  slowRequest: Config.Duration("TRACES_SLOW_REQUEST").pipe(Config.withDefault(Duration.millis(500)))
})

/** Decides from the request's `traceparent` header (or its absence) whether to trace it. */
export type TraceSampler = (traceparent: string | null) => boolean

/** The sampled flag of a W3C traceparent, if it is one (read by Effect's HttpTraceContext.w3c). */
const parentSampled = (traceparent: string | null): boolean | null =>
  traceparent === null ? null : Option.match(HttpTraceContext.w3c(Headers.fromRecordUnsafe({ traceparent: traceparent.trim() })), {
    onNone: () => null,
    onSome: (parent) => parent.sampled
  })

export const makeSampler = (name: SamplerName, ratio: number): TraceSampler => {
  const root: TraceSampler = name.endsWith("always_on")
    ? () => true
    : name.endsWith("always_off")
    ? () => false
    : () => Math.random() < ratio
  if (!name.startsWith("parentbased_")) return root
  return (traceparent) => parentSampled(traceparent) ?? root(traceparent)
}

/**
 * What an unsampled request runs with (add it to the request's context): the tracer off, so
 * nothing inside makes a span, and the HTTP server span skipped.
 */
export const untracedReferences: Context.Context<never> = Context.add(
  Context.make(References.TracerEnabled, false),
  HttpMiddleware.TracerDisabledWhen,
  () => true
)

/** What the request path knows of an answered request. */
export interface RequestSummary {
  readonly requestId: string
  readonly method: string
  /** The route template the router matched, or Routes.unmatchedRoute. */
  readonly route: string
  readonly status: number
  /** Epoch milliseconds. */
  readonly startedAt: number
  readonly durationMs: number
}

/** Which requests are traced, and the span of an unsampled request that failed or was slow. */
export interface SamplingService {
  /** Whether to trace a request that carries `traceparent` (or none). */
  readonly sampled: (traceparent: string | null) => boolean
  /** The context an unsampled request runs with (tracer off, no spans). */
  readonly untraced: Context.Context<never>
  /** Records one span for an unsampled request that failed (5xx) or was slow; nothing otherwise. */
  readonly summarize: (request: RequestSummary) => void
}

const make = Effect.gen(function*() {
  const config = yield* SamplingConfig
  // The application's tracer (TracingLive's), as it is when this service is built.
  const tracer = yield* Effect.tracer
  const slowMs = Duration.toMillis(config.slowRequest)
  const sampler = makeSampler(config.sampler, config.ratio)

  /** Whether to trace a request that carries `traceparent` (or none). */
  const sampled = (traceparent: string | null): boolean => sampler(traceparent)

  /** Records one span for an unsampled request that failed (5xx) or was slow; nothing otherwise. */
  const summarize = (request: RequestSummary): void => {
    const failed = request.status >= 500
    if (!failed && request.durationMs < slowMs) return
    const start = BigInt(Math.round(request.startedAt * 1e6))
    const span = tracer.span({
      name: `http.server ${request.method}`,
      parent: Option.none(),
      annotations: Context.empty(),
      links: [],
      startTime: start,
      kind: "server",
      root: true,
      sampled: true
    })
    span.attribute("http.request.method", request.method)
    span.attribute("http.route", request.route)
    span.attribute("http.response.status_code", request.status)
    span.attribute(SpanAttributes.requestId, request.requestId)
    span.attribute("hookline.sampled_because", failed ? "error" : "slow")
    span.end(start + BigInt(Math.round(request.durationMs * 1e6)), failed ? Exit.fail(`status ${request.status}`) : Exit.void)
  }

  return Sampling.of({ sampled, untraced: untracedReferences, summarize })
})

/**
 * The sampling decision and the after-the-fact span of unsampled requests. Build it where the
 * application's tracer (TracingLive) is already in place: it keeps the tracer it finds.
 */
export class Sampling extends Context.Service<Sampling, SamplingService>()("hookline/Sampling") {
  static readonly layer = Layer.effect(Sampling, make)
}
