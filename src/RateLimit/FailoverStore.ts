/**
 * The shared rate limit store (Redis) with a fallback: every call to Redis has a short deadline
 * (RATE_LIMIT_STORE_TIMEOUT); a call that fails or is late is answered by this process's own
 * in-process store instead, and so is every call after it while Redis is away. Availability wins
 * over exact limits: during an outage each process counts its own requests, so a key may get up
 * to its limit once per process, and no request waits on Redis for longer than the deadline.
 *
 * The switch is logged once (not per request) and shown by the `hookline_rate_limit_store_fallback`
 * gauge and by /readyz (`degraded`, still 200). A probe (PING, same deadline) every
 * RATE_LIMIT_STORE_PROBE_INTERVAL notices Redis answering again and switches back.
 */
import { Cause, Config, Duration, Effect, type Scope } from "effect"
import { RateLimiter } from "effect/persistence"
import { recordRateLimitFallback } from "../Observability/Metrics.js"

export const FailoverConfig = Config.all({
  timeout: Config.Duration("RATE_LIMIT_STORE_TIMEOUT").pipe(Config.withDefault(Duration.millis(100))),
  probeInterval: Config.Duration("RATE_LIMIT_STORE_PROBE_INTERVAL").pipe(Config.withDefault(Duration.seconds(1)))
})

type Store = RateLimiter.RateLimiterStore["Service"]

export interface FailoverStore {
  readonly store: Store
  /** True while the in-process fallback counts instead of the shared store. */
  readonly fallingBack: () => boolean
}

export const makeFailoverStore = (options: {
  readonly primary: Store
  readonly fallback: Store
  /** A cheap round trip to the shared store (PING). */
  readonly probe: Effect.Effect<unknown, unknown>
}): Effect.Effect<FailoverStore, Config.ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const { probeInterval, timeout } = yield* FailoverConfig
    let fallingBack = false
    recordRateLimitFallback(false)

    const fallBack = (cause: Cause.Cause<unknown>) =>
      Effect.suspend(() => {
        if (fallingBack) return Effect.void
        fallingBack = true
        recordRateLimitFallback(true)
        const error = Cause.squash(cause)
        return Effect.logWarning(
          `rate limit store (Redis) failed or did not answer within ${Duration.format(timeout)}; counting limits in this process until it does`
        ).pipe(Effect.annotateLogs({ error: error instanceof Error ? error.message : String(error) }))
      })

    /** The shared store's answer within the deadline, else the fallback's. */
    const either = <A>(primary: Effect.Effect<A, RateLimiter.RateLimiterError>, fallback: Effect.Effect<A, RateLimiter.RateLimiterError>) =>
      Effect.suspend(() =>
        fallingBack ? fallback : primary.pipe(
          Effect.timeout(timeout),
          Effect.catchCause((cause) => Cause.hasInterruptsOnly(cause) ? Effect.interrupt : Effect.andThen(fallBack(cause), fallback))
        )
      )

    const { fallback, primary } = options
    const store: Store = {
      fixedWindow: (call) => either(primary.fixedWindow(call), fallback.fixedWindow(call)),
      tokenBucket: (call) => either(primary.tokenBucket(call), fallback.tokenBucket(call)),
      adaptiveConsume: (call) => either(primary.adaptiveConsume(call), fallback.adaptiveConsume(call)),
      adaptiveFeedback: (call) => either(primary.adaptiveFeedback(call), fallback.adaptiveFeedback(call))
    }

    const probeOnce = Effect.suspend(() =>
      !fallingBack ? Effect.void : options.probe.pipe(
        Effect.timeout(timeout),
        Effect.andThen(Effect.sync(() => {
          fallingBack = false
          recordRateLimitFallback(false)
        })),
        Effect.andThen(Effect.logInfo("rate limit store (Redis) answers again; limits are shared again")),
        Effect.ignore
      )
    )
    yield* probeOnce.pipe(Effect.andThen(Effect.sleep(probeInterval)), Effect.forever, Effect.forkScoped)

    return { store, fallingBack: () => fallingBack }
  })
