/**
 * `bun bench/fiber-cost.ts`: what Effect's fiber machinery costs per request, without HTTP or a
 * database. 32 fibers in flight (like wrk -c32), 100,000 each way, this process's CPU (user +
 * system, every thread) per fiber. It explains why a route that waits for I/O once costs more
 * than the framework floor, which never waits (bench/README.md, "Where a request's CPU goes").
 */
import { Context, Effect } from "effect"

const fibers = 100_000
const inFlight = 32

class Extra extends Context.Service<Extra, number>()("bench/Extra") {}

const cpuMicros = () => {
  const usage = process.cpuUsage()
  return usage.user + usage.system
}

/** One I/O wait: the fiber suspends and is resumed from the event loop, as after a query. */
const suspend = Effect.callback<void>((resume) => {
  setImmediate(() => resume(Effect.void))
})

const ways: ReadonlyArray<readonly [string, Effect.Effect<void>]> = [
  ["no suspension", Effect.void],
  ["one suspension", suspend],
  ["Effect.provideService, no suspension", Effect.void.pipe(Effect.provideService(Extra, 1))],
  ["Effect.provideService around one suspension", suspend.pipe(Effect.provideService(Extra, 1))],
  ["Effect.annotateLogs around one suspension", suspend.pipe(Effect.annotateLogs("key", 1))],
  ["Effect.gen of three steps, one suspension", Effect.gen(function*() {
    yield* Effect.void
    yield* suspend
    yield* Effect.void
  })]
]

/** CPU µs per fiber running `effect`, `fibers` of them with `inFlight` at a time. */
const measure = (effect: Effect.Effect<void>) =>
  new Promise<number>((done) => {
    let started = 0
    let finished = 0
    const started0 = cpuMicros()
    const next = () => {
      if (started === fibers) {
        if (finished === fibers) done((cpuMicros() - started0) / fibers)
        return
      }
      started++
      Effect.runFork(effect).addObserver(() => {
        finished++
        queueMicrotask(next)
      })
    }
    for (let i = 0; i < inFlight; i++) next()
  })

for (const [, effect] of ways) await measure(effect) // warm-up: JIT
console.log(`| way | CPU µs per fiber |\n|---|---:|`)
for (const [name, effect] of ways) console.log(`| ${name} | ${(await measure(effect)).toFixed(1)} |`)
