import { Context, Duration, Effect, Latch, Layer, Ref } from "effect"

export interface WorkSignalService {
  /** Wakes the workers waiting in this process. */
  readonly wake: Effect.Effect<void>
  /** How many wakes there have been; read it before looking for work, then wait after it. */
  readonly generation: Effect.Effect<number>
  /** Sleeps until a wake after `seen`, or `timeout`. */
  readonly waitAfter: (seen: number, timeout: Duration.Duration) => Effect.Effect<void>
}

const make = Effect.gen(function*() {
  const latch = yield* Latch.make(false)
  const generation = yield* Ref.make(0)
  return WorkSignal.of({
    wake: Ref.update(generation, (n) => n + 1).pipe(Effect.andThen(latch.release), Effect.asVoid),
    generation: Ref.get(generation),
    waitAfter: (seen: number, timeout: Duration.Duration) =>
      Effect.gen(function*() {
        if ((yield* Ref.get(generation)) !== seen) return
        yield* Effect.raceFirst(latch.await, Effect.sleep(timeout))
      })
  })
})

/**
 * Wakes this process's idle workers when a job is queued here; other processes hear of it
 * through LISTEN/NOTIFY (or their polling). A wake that comes while no worker waits is
 * remembered by the generation counter, so a worker about to sleep does not miss it.
 */
export class WorkSignal extends Context.Service<WorkSignal, WorkSignalService>()("hookline/WorkSignal") {
  static readonly layer = Layer.effect(WorkSignal, make)
}
