/** Domain services on a test database, for tests that call them directly (no HTTP). */
import { ConfigProvider, Layer, Logger, LogLevel, ManagedRuntime } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ServicesLive } from "../../src/App.js"
import { SqlLive } from "../../src/Sql.js"

export const servicesRuntime = (databaseUrl: string, env: Record<string, string> = {}) => {
  const provider = ConfigProvider.fromMap(new Map(Object.entries({
      DATABASE_URL: databaseUrl,
      DATA_DIR: mkdtempSync(join(tmpdir(), "hookline-services-")),
      ...env
    }))).pipe(
    ConfigProvider.orElse(() => ConfigProvider.fromEnv())
  )
  const layer = ServicesLive.pipe(
    Layer.provideMerge(SqlLive),
    Layer.provide(Logger.minimumLogLevel(LogLevel.Warning)),
    Layer.provide(Layer.setConfigProvider(provider))
  )
  return ManagedRuntime.make(layer)
}
