/** Domain services on a test database, for tests that call them directly (no HTTP). */
import { ConfigProvider, Layer, ManagedRuntime, References } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ServicesLive } from "../../src/App.js"
import { SqlLive } from "../../src/Sql.js"

export const servicesRuntime = (databaseUrl: string, env: Record<string, string> = {}) => {
  const inherited: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined) inherited[name] = value
  const provider = ConfigProvider.fromEnv({
    env: { ...inherited, DATABASE_URL: databaseUrl, DATA_DIR: mkdtempSync(join(tmpdir(), "hookline-services-")), ...env }
  })
  const layer = ServicesLive.pipe(
    Layer.provideMerge(SqlLive),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
    Layer.provide(ConfigProvider.layer(provider))
  )
  return ManagedRuntime.make(layer)
}
