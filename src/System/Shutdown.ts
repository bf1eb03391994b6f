/**
 * Graceful shutdown. On SIGTERM/SIGINT `BunRuntime.runMain` interrupts the application and its
 * layers release in reverse order of acquisition. `DrainOnShutdownLive` is acquired after the
 * HTTP app, so its release runs first, while the database, the services and the request fibers
 * are all still alive:
 *
 * 1. the gate closes: every new request (on a new or a kept-alive connection) is answered
 *    503 `service_unavailable` with `Connection: close`, so clients and load balancers go elsewhere;
 * 2. requests already admitted run to the end, for at most SHUTDOWN_GRACE_PERIOD (default 10 s);
 * 3. then the rest of the application releases: the HTTP server interrupts whatever request is
 *    still running (a metered one refunds its hold), workers hand their claimed jobs back to the
 *    queue, the webhook dispatcher hands its leases back, traces are flushed, the process exits 0.
 *
 * Background fibers are interrupted alongside step 2 (they are independent of requests).
 */
import { HttpMiddleware, HttpServerResponse } from "@effect/platform"
import { Config, Duration, Effect, Layer, Ref, Stream, SubscriptionRef } from "effect"
import { RequestId } from "../Errors.js"

export const ShutdownConfig = Config.all({
  /** How long admitted requests may keep running after a shutdown signal. */
  gracePeriod: Config.duration("SHUTDOWN_GRACE_PERIOD").pipe(Config.withDefault(Duration.seconds(10)))
})

export class ShutdownGate extends Effect.Service<ShutdownGate>()("hookline/ShutdownGate", {
  effect: Effect.gen(function*() {
    const config = yield* ShutdownConfig
    const draining = yield* Ref.make(false)
    const inFlight = yield* SubscriptionRef.make(0)

    /** Admits a request unless draining; the counter moves in one step with the check. */
    const admit = Effect.flatMap(Ref.get(draining), (closed) =>
      closed ? Effect.succeed(false) : Effect.as(SubscriptionRef.update(inFlight, (n) => n + 1), true))

    const release = SubscriptionRef.update(inFlight, (n) => n - 1)

    /** Closes the gate, then waits for admitted requests to finish, up to the grace period. */
    const drain = Effect.gen(function*() {
      yield* Ref.set(draining, true)
      const running = yield* SubscriptionRef.get(inFlight)
      yield* Effect.logInfo("shutting down: refusing new requests, finishing those in flight").pipe(
        Effect.annotateLogs({ in_flight: running, grace_period: Duration.format(config.gracePeriod) })
      )
      const finished = yield* inFlight.changes.pipe(
        Stream.takeUntil((n) => n <= 0),
        Stream.runDrain,
        // Finalizers run uninterruptibly; the wait must be interruptible for the timeout to end it.
        Effect.interruptible,
        Effect.timeoutTo({ duration: config.gracePeriod, onSuccess: () => true, onTimeout: () => false })
      )
      if (!finished) {
        yield* Effect.logWarning("grace period over: interrupting the requests still running").pipe(
          Effect.annotateLogs({ in_flight: yield* SubscriptionRef.get(inFlight) })
        )
      }
    })

    return { admit, release, drain, isDraining: Ref.get(draining), inFlight: SubscriptionRef.get(inFlight) } as const
  })
}) {}

const refusal = (requestId: string) =>
  HttpServerResponse.unsafeJson(
    {
      error: {
        type: "service_unavailable",
        message: "The server is shutting down; retry the request.",
        request_id: requestId
      }
    },
    { status: 503, headers: { "x-request-id": requestId, "connection": "close", "retry-after": "1" } }
  )

/**
 * Counts the requests it lets through, and refuses new ones once draining. Goes inside the
 * request-id middleware (the refusal carries the request id and is in the access log).
 */
export const shutdownGateMiddleware = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const gate = yield* ShutdownGate
    return yield* Effect.acquireUseRelease(
      gate.admit,
      (admitted) => (admitted ? app : Effect.map(RequestId, refusal)),
      (admitted) => (admitted ? gate.release : Effect.void)
    )
  })
)

/** Acquire it after the HTTP app (so its release runs first): drains on shutdown. */
export const DrainOnShutdownLive = Layer.scopedDiscard(
  Effect.flatMap(ShutdownGate, (gate) => Effect.addFinalizer(() => gate.drain))
)
