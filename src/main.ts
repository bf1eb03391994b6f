/** Start: config → database (migrated) → services → HTTP server + background fibers. */
import { BunRuntime } from "@effect/platform-bun"
import { Effect, Layer, Option } from "effect"
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { appLayer, ServerLive } from "./App.js"
import { publicBaseUrl, ServerConfig } from "./Config.js"
import { ensureDemo } from "./Demo.js"
import { LoggingLive } from "./Logging.js"

/**
 * Embedded mode: tell the admin CLI where this server listens (DATA_DIR/server.json), and on
 * the first start create the demo account, key and catalog.
 */
const EmbeddedStartup = Layer.scopedDiscard(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    if (Option.isSome(config.databaseUrl)) return
    const serverFile = join(config.dataDir, "server.json")
    yield* Effect.acquireRelease(
      Effect.sync(() =>
        writeFileSync(serverFile, JSON.stringify({ pid: process.pid, url: `http://127.0.0.1:${config.port}`, public_url: publicBaseUrl(config) }))
      ),
      () => Effect.sync(() => rmSync(serverFile, { force: true }))
    )
    if (config.seedDemo) yield* ensureDemo
  })
)

const Main = EmbeddedStartup.pipe(Layer.provideMerge(appLayer(ServerLive)))

// No pretty logger from runMain: LoggingLive is the only logger (one line per entry, redacted).
Layer.launch(Main).pipe(Effect.provide(LoggingLive), (main) => BunRuntime.runMain(main, { disablePrettyLogger: true }))
