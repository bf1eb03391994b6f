/**
 * Graceful shutdown. On SIGTERM/SIGINT `BunRuntime.runMain` interrupts the application and its
 * layers release in reverse order of acquisition. `DrainOnShutdownLive` is acquired after the
 * HTTP app, so its release runs first, while the database, the services and the request fibers
 * are all still alive:
 *
 * 1. the gate (a counter in the front door, src/System/Server.ts) closes: every new request (on a new or a kept-alive connection) is answered
 *    503 `service_unavailable` with `Connection: close`, so clients and load balancers go elsewhere;
 * 2. requests already admitted run to the end, for at most SHUTDOWN_GRACE_PERIOD (default 10 s);
 * 3. then the rest of the application releases: the HTTP server interrupts whatever request is
 *    still running (a metered one refunds its hold), workers hand their claimed jobs back to the
 *    queue, the webhook dispatcher hands its leases back, traces are flushed, the process exits 0.
 *
 * Background fibers are interrupted alongside step 2 (they are independent of requests).
 */
import { Config, Duration, Effect, Layer } from "effect"

export const ShutdownConfig = Config.all({
  /** How long admitted requests may keep running after a shutdown signal. */
  gracePeriod: Config.duration("SHUTDOWN_GRACE_PERIOD").pipe(Config.withDefault(Duration.seconds(10)))
})

/**
 * The admission gate of the front door (src/System/Server.ts): a plain counter of the requests
 * in flight and a draining flag, touched synchronously on every request (no fiber, no Ref).
 */
export class ShutdownGate extends Effect.Service<ShutdownGate>()("hookline/ShutdownGate", {
  effect: Effect.gen(function*() {
    const config = yield* ShutdownConfig
    let inFlight = 0
    let draining = false
    let whenIdle: (() => void) | null = null

    /** Admits a request (counts it) unless draining. */
    const enter = (): boolean => {
      if (draining) return false
      inFlight++
      return true
    }

    const leave = (): void => {
      inFlight--
      if (inFlight === 0 && whenIdle !== null) whenIdle()
    }

    const idle = Effect.async<void>((resume) => {
      if (inFlight === 0) return resume(Effect.void)
      whenIdle = () => resume(Effect.void)
      return Effect.sync(() => (whenIdle = null))
    })

    /** Closes the gate, then waits for admitted requests to finish, up to the grace period. */
    const drain = Effect.gen(function*() {
      draining = true
      yield* Effect.logInfo("shutting down: refusing new requests, finishing those in flight").pipe(
        Effect.annotateLogs({ in_flight: inFlight, grace_period: Duration.format(config.gracePeriod) })
      )
      const finished = yield* idle.pipe(
        // Finalizers run uninterruptibly; the wait must be interruptible for the timeout to end it.
        Effect.interruptible,
        Effect.timeoutTo({ duration: config.gracePeriod, onSuccess: () => true, onTimeout: () => false })
      )
      if (!finished) {
        yield* Effect.logWarning("grace period over: interrupting the requests still running").pipe(
          Effect.annotateLogs({ in_flight: inFlight })
        )
      }
    })

    return { enter, leave, drain, isDraining: () => draining, inFlight: () => inFlight } as const
  })
}) {}

/** Acquire it after the HTTP app (so its release runs first): drains on shutdown. */
export const DrainOnShutdownLive = Layer.scopedDiscard(
  Effect.flatMap(ShutdownGate, (gate) => Effect.addFinalizer(() => gate.drain))
)
