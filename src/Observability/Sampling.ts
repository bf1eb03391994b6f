/**
 * Which requests are traced. Spans cost CPU on every request that makes them, so only a
 * sample does (OpenTelemetry's standard settings):
 *
 * - OTEL_TRACES_SAMPLER: `parentbased_traceidratio` (default), `traceidratio`, `always_on`,
 *   `always_off`, `parentbased_always_on`, `parentbased_always_off`. "parentbased" follows the
 *   sampled flag of an incoming W3C `traceparent`, so a caller's trace is never cut.
 * - OTEL_TRACES_SAMPLER_ARG: the ratio for the `*traceidratio` samplers (default 0.01, 1 %).
 *
 * A request that was not sampled runs with the tracer off (no span objects, no SQL spans). If it
 * ends with a 5xx or takes longer than TRACES_SLOW_REQUEST (default 500 ms), one span is still
 * recorded for it after the fact: the route, status, duration and request id, so every error
 * and every slow request is in the traces.
 */
import { Config, ConfigError, Context, Duration, Effect, Either, Exit, Option } from "effect"
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

export const SamplingConfig = Config.all({
  sampler: Config.string("OTEL_TRACES_SAMPLER").pipe(
    Config.withDefault("parentbased_traceidratio"),
    Config.mapOrFail((name) => {
      const found = samplers.find((known) => known === name.toLowerCase())
      return found === undefined
        ? Either.left(ConfigError.InvalidData([], `OTEL_TRACES_SAMPLER must be one of ${samplers.join(", ")}`))
        : Either.right<SamplerName>(found)
    })
  ),
  ratio: Config.number("OTEL_TRACES_SAMPLER_ARG").pipe(
    Config.withDefault(0.01),
    Config.validate({ message: "OTEL_TRACES_SAMPLER_ARG must be between 0 and 1", validation: (r) => r >= 0 && r <= 1 })
  ),
  slowRequest: Config.duration("TRACES_SLOW_REQUEST").pipe(Config.withDefault(Duration.millis(500)))
})

/** Decides from the request's `traceparent` header (or its absence) whether to trace it. */
export type TraceSampler = (traceparent: string | null) => boolean

/** The sampled flag of a W3C traceparent (`00-<trace id>-<span id>-<flags>`), if it is one. */
const parentSampled = (traceparent: string | null): boolean | null => {
  if (traceparent === null) return null
  const match = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-([0-9a-f]{2})$/.exec(traceparent.trim())
  return match === null ? null : (parseInt(match[1], 16) & 1) === 1
}

export const makeSampler = (name: SamplerName, ratio: number): TraceSampler => {
  const root: TraceSampler = name.endsWith("always_on")
    ? () => true
    : name.endsWith("always_off")
    ? () => false
    : () => Math.random() < ratio
  if (!name.startsWith("parentbased_")) return root
  return (traceparent) => parentSampled(traceparent) ?? root(traceparent)
}

/** What the front door knows of an answered request. */
export interface RequestSummary {
  readonly requestId: string
  readonly method: string
  readonly route: string
  readonly status: number
  /** Epoch milliseconds. */
  readonly startedAt: number
  readonly durationMs: number
}

export class Sampling extends Effect.Service<Sampling>()("hookline/Sampling", {
  effect: Effect.gen(function*() {
    const config = yield* SamplingConfig
    const tracer = yield* Effect.tracer
    const slowMs = Duration.toMillis(config.slowRequest)
    const sampler = makeSampler(config.sampler, config.ratio)

    /** Records one span for an unsampled request that failed (5xx) or was slow; nothing otherwise. */
    const summarize = (request: RequestSummary): void => {
      const failed = request.status >= 500
      if (!failed && request.durationMs < slowMs) return
      const start = BigInt(Math.round(request.startedAt * 1e6))
      const span = tracer.span(`http.server ${request.method}`, Option.none(), Context.empty(), [], start, "server")
      span.attribute("http.request.method", request.method)
      span.attribute("http.route", request.route)
      span.attribute("http.response.status_code", request.status)
      span.attribute(SpanAttributes.requestId, request.requestId)
      span.attribute("hookline.sampled_because", failed ? "error" : "slow")
      span.end(start + BigInt(Math.round(request.durationMs * 1e6)), failed ? Exit.fail(`status ${request.status}`) : Exit.void)
    }

    return { sampler, summarize } as const
  })
}) {}
