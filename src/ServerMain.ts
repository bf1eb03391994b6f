/** One server process: config → database (migrated) → services → HTTP server + background fibers. */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Data, Effect, Exit, Layer, Option, Runtime } from "effect"
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { appLayer, ServerLive } from "./App.js"
import { announceStart } from "./Banner.js"
import { publicBaseUrl, ServerConfig } from "./Config.js"
import { ensureDemo } from "./Demo.js"
import { LoggingLive } from "./Logging.js"
import { ClipScorer } from "./Predictions/Scorer.js"
import { ProcessGuardsLive } from "./System/ProcessGuards.js"
import { makeStartupWork, StartupWork } from "./System/Startup.js"

/**
 * Once the server listens: in embedded mode tell the admin CLI where (DATA_DIR/server.json) and
 * on the first start create the demo account, key and catalog; then say where everything is.
 */
const Startup = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const embedded = Option.isNone(config.databaseUrl)
    if (embedded) {
      const serverFile = join(config.dataDir, "server.json")
      yield* Effect.acquireRelease(
        Effect.sync(() =>
          writeFileSync(serverFile, JSON.stringify({ pid: process.pid, url: `http://127.0.0.1:${config.port}`, public_url: publicBaseUrl(config) }))
        ),
        () => Effect.sync(() => rmSync(serverFile, { force: true }))
      )
    }
    yield* announceStart(embedded && config.seedDemo ? yield* ensureDemo : null)
    ;(yield* StartupWork).finish()
  })
)

/** Until Startup ends, /readyz says the process is still starting (the demo data may not be in yet). */
const startupWork = Layer.succeed(StartupWork, makeStartupWork("the demo account and catalog are being prepared"))

// The process guards first: nothing thrown while the rest starts or serves ends the process.
const Main = Startup.pipe(
  Layer.provideMerge(appLayer(ServerLive)),
  Layer.provide(ClipScorer.layer),
  Layer.provideMerge(startupWork),
  Layer.provideMerge(ProcessGuardsLive)
)

/**
 * A failure to start whose message already says what to do (the port is taken): logged as that
 * one line, and the process exits 1 without the runtime's report of the cause and its stack.
 */
class StartRefused extends Data.TaggedError("StartRefused")<{ readonly message: string }> {
  override readonly [Runtime.errorReported] = false
}

/** A stop asked for by a signal (the main fiber interrupted, everything released) exits 0, as orchestrators expect. */
const teardown: Runtime.Teardown = (exit, onExit) =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)

Layer.launch(Main).pipe(
  // Runs after every layer has released (requests drained, work handed back, database closed).
  Effect.onInterrupt(() => Effect.logInfo("Hookline stopped")),
  Effect.catchTag("ServerStartFailed", (failed) =>
    Effect.logError(failed.message).pipe(Effect.andThen(Effect.fail(new StartRefused({ message: failed.message }))))),
  // LoggingLive is the only logger (one line per entry, redacted).
  Effect.provide(LoggingLive),
  NodeRuntime.runMain({ teardown })
)
