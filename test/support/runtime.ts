/** Domain services on a test database, for tests that call them directly (no HTTP). */
import { ConfigProvider, Effect, Layer, ManagedRuntime, References } from "effect"
import { rmSync } from "node:fs"
import { ServicesLive } from "../../src/App.js"
import { SqlLive } from "../../src/Sql.js"
import { tempDir } from "./tempDirs.js"

export const servicesRuntime = (databaseUrl: string, env: Record<string, string> = {}) => {
  const inherited: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined) inherited[name] = value
  // A data directory of its own unless one is given, removed when the runtime is disposed.
  const ownDataDir = env.DATA_DIR === undefined ? tempDir("hookline-services-") : null
  const provider = ConfigProvider.fromEnv({
    env: { ...inherited, DATABASE_URL: databaseUrl, ...(ownDataDir === null ? {} : { DATA_DIR: ownDataDir }), ...env }
  })
  const removeOwnDataDir = Layer.effectDiscard(
    Effect.addFinalizer(() => Effect.sync(() => ownDataDir !== null && rmSync(ownDataDir, { recursive: true, force: true })))
  )
  const layer = ServicesLive.pipe(
    Layer.provideMerge(SqlLive),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
    Layer.provide(ConfigProvider.layer(provider)),
    Layer.provide(removeOwnDataDir)
  )
  return ManagedRuntime.make(layer)
}
