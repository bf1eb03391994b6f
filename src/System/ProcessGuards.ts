/**
 * The last line of defence: an exception nothing caught (an `'error'` event with no listener, a
 * throw in a timer callback) or a promise rejection nobody handled would end the process and
 * every request with it. Here they are logged as defects, through the server's logger, and the
 * process keeps serving; each one is a bug to fix where it started.
 */
import { Cause, Effect, Layer } from "effect"

export const ProcessGuardsLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const runFork = Effect.runForkWith(yield* Effect.context<never>())
    const report = (what: string) => (error: unknown) => {
      runFork(Effect.logError(`${what}; the process keeps serving`, Cause.die(error)).pipe(Effect.annotateLogs({ defect: true })))
    }
    const onException = report("uncaught exception")
    const onRejection = report("unhandled promise rejection")
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        process.on("uncaughtException", onException)
        process.on("unhandledRejection", onRejection)
      }),
      () =>
        Effect.sync(() => {
          process.off("uncaughtException", onException)
          process.off("unhandledRejection", onRejection)
        })
    )
  })
)
