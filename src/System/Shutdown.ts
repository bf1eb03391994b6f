/**
 * Graceful shutdown. On SIGTERM/SIGINT `NodeRuntime.runMain` interrupts the application and its
 * layers release in reverse order of acquisition. `DrainOnShutdownLive` is acquired after the
 * HTTP server, so its release runs first, while the database, the services and the request
 * fibers are all still alive:
 *
 * 1. the gate closes: every new request (on a new or a kept-alive connection) is answered
 *    503 `service_unavailable` with `Connection: close` (src/System/Pipeline.ts), so clients and
 *    load balancers go elsewhere;
 * 2. requests already admitted run to the end, for at most SHUTDOWN_GRACE_PERIOD (default 10 s);
 * 3. requests still running then are interrupted, and the drain waits for them to end: a
 *    metered one refunds its hold while the database is still there;
 * 4. then the rest of the application releases: workers hand their claimed jobs back to the
 *    queue, the webhook dispatcher hands its leases back, traces are flushed, the process exits 0.
 *
 * Background fibers are interrupted alongside step 2 (they are independent of requests).
 */
import { Config, Context, Duration, Effect, Fiber, Layer } from "effect"

export const ShutdownConfig = Config.all({
  /** How long admitted requests may keep running after a shutdown signal. */
  gracePeriod: Config.Duration("SHUTDOWN_GRACE_PERIOD").pipe(Config.withDefault(Duration.seconds(10)))
})

/** How long interrupted requests get to run their finalizers (refunds) before the app releases anyway. */
const interruptGrace = Duration.seconds(5)

type RequestFiber = Fiber.Fiber<unknown, unknown>

/** The admission gate as the front door and the shutdown use it. */
export interface ShutdownGateService {
  /** Admits the request running on `fiber` unless draining (false), and tracks it until the fiber ends. */
  readonly enter: (fiber: RequestFiber) => boolean
  /** Stops tracking a request (done by itself when its fiber ends). */
  readonly leave: (fiber: RequestFiber) => void
  /** Closes the gate, waits for admitted requests up to SHUTDOWN_GRACE_PERIOD, then interrupts the rest. */
  readonly drain: Effect.Effect<void>
  readonly isDraining: () => boolean
  /** How many admitted requests are running. */
  readonly inFlight: () => number
}

const make = Effect.gen(function*() {
  const config = yield* ShutdownConfig
  // The fibers of the admitted requests: the scope the shutdown closes. A plain Set touched
  // synchronously on every request (no fiber, no Ref).
  const running = new Set<RequestFiber>()
  let draining = false
  let whenIdle: (() => void) | null = null

  const leave = (fiber: RequestFiber): void => {
    running.delete(fiber)
    if (running.size === 0 && whenIdle !== null) whenIdle()
  }

  /**
   * Admits the request running on `fiber` unless draining, and tracks it until the fiber ends:
   * after its answer is handed to Bun and its server span has ended, so the traces flushed at
   * shutdown hold it.
   */
  const enter = (fiber: RequestFiber): boolean => {
    if (draining) return false
    running.add(fiber)
    fiber.addObserver(() => leave(fiber))
    return true
  }

  const idle = Effect.callback<void>((resume) => {
    if (running.size === 0) return resume(Effect.void)
    whenIdle = () => resume(Effect.void)
    return Effect.sync(() => (whenIdle = null))
  })

  /** Closes the gate, waits for admitted requests up to the grace period, then interrupts the rest. */
  const drain = Effect.gen(function*() {
    draining = true
    yield* Effect.logInfo("shutting down: refusing new requests, finishing those in flight").pipe(
      Effect.annotateLogs({ in_flight: running.size, grace_period: Duration.format(config.gracePeriod) })
    )
    const finished = yield* idle.pipe(
      Effect.as(true),
      // Finalizers run uninterruptibly; the wait must be interruptible for the timeout to end it.
      Effect.interruptible,
      Effect.timeoutOrElse({ duration: config.gracePeriod, orElse: () => Effect.succeed(false) })
    )
    if (finished) return
    yield* Effect.logWarning("grace period over: interrupting the requests still running").pipe(
      Effect.annotateLogs({ in_flight: running.size })
    )
    yield* Fiber.interruptAll([...running]).pipe(
      Effect.interruptible,
      Effect.timeoutOrElse({
        duration: interruptGrace,
        orElse: () => Effect.logWarning("requests still running after their interruption; releasing the application")
      })
    )
  })

  return ShutdownGate.of({ enter, leave, drain, isDraining: () => draining, inFlight: () => running.size })
})

/** The admission gate: which requests are admitted and running, and the drain that ends them. */
export class ShutdownGate extends Context.Service<ShutdownGate, ShutdownGateService>()("hookline/ShutdownGate") {
  static readonly layer = Layer.effect(ShutdownGate, make)
}

/** Acquire it after the HTTP server (so its release runs first): drains on shutdown. */
export const DrainOnShutdownLive = Layer.effectDiscard(
  Effect.flatMap(ShutdownGate, (gate) => Effect.addFinalizer(() => gate.drain))
)
