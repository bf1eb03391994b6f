/**
 * The shared rate limit store (Redis) with a fallback. Every call to Redis has a short deadline
 * (RATE_LIMIT_STORE_TIMEOUT); a call that fails or is late is answered by this process's own
 * in-process store instead, so no request waits on Redis longer than the deadline.
 *
 * One late call says little: the deadline includes this process's own event loop, so a burst of
 * requests can make every call in flight late at once. The process therefore switches to local
 * counting only after RATE_LIMIT_STORE_FAILURES failed or late calls in a row, each one started
 * after the previous one had failed (calls that overlapped a counted failure are the same
 * observation and count once); a call that answers in time, started after the last failure,
 * ends the streak. Availability wins over exact limits: while counting locally each process
 * counts its own requests, so a key may get up to its limit once per process.
 *
 * The switch drops the connection (a silent one would hold its commands until the kernel gives
 * up on the socket) and is logged once, shown by the `hookline_rate_limit_store_fallback` gauge
 * and by /readyz (`degraded`, still 200). Every RATE_LIMIT_STORE_PROBE_INTERVAL a PING on a fresh
 * connection (within RATE_LIMIT_STORE_PROBE_TIMEOUT) looks for Redis; once it answers, limits
 * are shared again, on a new connection.
 */
import { Cause, Config, Duration, Effect, type Scope } from "effect"
import { RateLimiter } from "effect/persistence"
import { recordRateLimitFallback } from "../Observability/Metrics.js"

export const FailoverConfig = Config.all({
  timeout: Config.Duration("RATE_LIMIT_STORE_TIMEOUT").pipe(Config.withDefault(Duration.millis(100))),
  failures: Config.Int("RATE_LIMIT_STORE_FAILURES").pipe(Config.withDefault(3)),
  probeInterval: Config.Duration("RATE_LIMIT_STORE_PROBE_INTERVAL").pipe(Config.withDefault(Duration.seconds(1))),
  probeTimeout: Config.Duration("RATE_LIMIT_STORE_PROBE_TIMEOUT").pipe(Config.withDefault(Duration.seconds(1)))
})

type Store = RateLimiter.RateLimiterStore["Service"]

export interface FailoverStore {
  readonly store: Store
  /** True while the in-process fallback counts instead of the shared store. */
  readonly fallingBack: () => boolean
}

const describe = (cause: Cause.Cause<unknown>) => {
  const error = Cause.squash(cause)
  return error instanceof Error ? error.message : String(error)
}

export const makeFailoverStore = (options: {
  readonly primary: Store
  readonly fallback: Store
  /** A round trip to the shared store on a connection of its own (PING). */
  readonly probe: Effect.Effect<unknown, unknown>
  /** Drops the primary's connection; its next command opens a new one. */
  readonly renew: Effect.Effect<void>
}): Effect.Effect<FailoverStore, Config.ConfigError, Scope.Scope> =>
  Effect.gen(function*() {
    const { failures, probeInterval, probeTimeout, timeout } = yield* FailoverConfig
    let fallingBack = false
    /** Failed or late calls in a row, and the count of failures observed so far (a call remembers it when it starts). */
    let streak = 0
    let observed = 0
    recordRateLimitFallback(false)

    const failed = (startedAfter: number, cause: Cause.Cause<unknown>) =>
      Effect.suspend(() => {
        // A call that was already under way when a failure was counted is the same observation.
        if (fallingBack || startedAfter !== observed) return Effect.void
        observed++
        streak++
        if (streak < Math.max(1, failures)) return Effect.void
        fallingBack = true
        recordRateLimitFallback(true)
        return options.renew.pipe(
          Effect.andThen(Effect.logWarning(
            `rate limit store (Redis) failed or did not answer within ${Duration.format(timeout)} ${streak} times in a row; counting limits in this process until it answers again`
          )),
          Effect.annotateLogs({ error: describe(cause) })
        )
      })

    const answered = (startedAfter: number) =>
      Effect.sync(() => {
        if (startedAfter === observed) streak = 0
      })

    /** The shared store's answer within the deadline, else the fallback's. */
    const either = <A>(primary: Effect.Effect<A, RateLimiter.RateLimiterError>, fallback: Effect.Effect<A, RateLimiter.RateLimiterError>) =>
      Effect.suspend(() => {
        if (fallingBack) return fallback
        const startedAfter = observed
        return primary.pipe(
          Effect.timeout(timeout),
          Effect.tap(() => answered(startedAfter)),
          Effect.catchCause((cause) =>
            Cause.hasInterruptsOnly(cause) ? Effect.interrupt : Effect.andThen(failed(startedAfter, cause), fallback)
          )
        )
      })

    const { fallback, primary } = options
    const store: Store = {
      fixedWindow: (call) => either(primary.fixedWindow(call), fallback.fixedWindow(call)),
      tokenBucket: (call) => either(primary.tokenBucket(call), fallback.tokenBucket(call)),
      adaptiveConsume: (call) => either(primary.adaptiveConsume(call), fallback.adaptiveConsume(call)),
      adaptiveFeedback: (call) => either(primary.adaptiveFeedback(call), fallback.adaptiveFeedback(call))
    }

    const recovered = Effect.sync(() => {
      streak = 0
      observed++
      fallingBack = false
      recordRateLimitFallback(false)
    })
    const probeOnce = Effect.suspend(() =>
      !fallingBack ? Effect.void : options.probe.pipe(
        Effect.timeout(probeTimeout),
        // The connection the calls used may be the silent one: they start on a new one.
        Effect.andThen(options.renew),
        Effect.andThen(recovered),
        Effect.andThen(Effect.logInfo("rate limit store (Redis) answers again on a new connection; limits are shared again")),
        Effect.ignore
      )
    )
    yield* probeOnce.pipe(Effect.andThen(Effect.sleep(probeInterval)), Effect.forever, Effect.forkScoped)

    return { store, fallingBack: () => fallingBack }
  })
