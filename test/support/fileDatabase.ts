/**
 * A database of a test file's own: created before the file's tests, migrated as `layer` is built
 * on it (with the SqlClient, kept in the runtime), and dropped after them. `embedded`: the
 * embedded PGlite in a temporary data directory instead of PostgreSQL.
 */
import { afterAll, beforeAll } from "bun:test"
import { ConfigProvider, Effect, Layer, ManagedRuntime, References } from "effect"
import type { SqlClient } from "effect/sql"
import { SqlLive } from "../../src/Sql.js"
import { createDatabase, dropDatabase } from "./server.js"
import { tempDir } from "./tempDirs.js"

export const fileDatabase = <A>(layer: Layer.Layer<A, unknown, SqlClient.SqlClient>, options: { readonly embedded?: boolean } = {}) => {
  let databaseUrl = ""
  let runtime: ManagedRuntime.ManagedRuntime<A | SqlClient.SqlClient, unknown> | undefined
  beforeAll(async () => {
    const env: Record<string, string> = options.embedded === true
      ? { DATA_DIR: tempDir("hookline-embedded-ledger-") }
      : { DATABASE_URL: (databaseUrl = await createDatabase()), PG_MAX_CONNECTIONS: "4" }
    runtime = ManagedRuntime.make(
      layer.pipe(
        Layer.provideMerge(SqlLive),
        Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
      )
    )
    // Built (and migrated) here, not in the first test.
    await runtime.runPromise(Effect.void)
  }, 60_000)
  afterAll(async () => {
    await runtime?.dispose()
    if (databaseUrl !== "") await dropDatabase(databaseUrl)
  }, 60_000)
  return {
    run: <X, E>(effect: Effect.Effect<X, E, A | SqlClient.SqlClient>): Promise<X> => {
      if (runtime === undefined) throw new Error("fileDatabase: used outside the file's tests")
      return runtime.runPromise(effect)
    }
  }
}
