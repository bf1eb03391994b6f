import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { HttpApiBuilder } from "effect/http-api"
import { readdirSync } from "node:fs"
import { HooklineApi } from "../Api.js"
import { ServiceUnavailable } from "../Errors.js"
import { Metrics } from "../Observability/Metrics.js"
import { checkMetricsAccess } from "../Observability/MetricsEndpoint.js"
import { migrationsDirectory } from "../Sql.js"

/** The highest migration id shipped with this build; /readyz wants the database at least there. */
const latestMigrationId = Math.max(
  0,
  ...readdirSync(migrationsDirectory).flatMap((file) => {
    const match = /^(\d+)_[^.]+\.(js|ts)$/.exec(file)
    return match === null ? [] : [Number(match[1])]
  })
)

const notAnswering = new ServiceUnavailable({ message: "The database does not answer." })

export const SystemHandlers = HttpApiBuilder.group(HooklineApi, "system", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const metrics = yield* Metrics
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("metrics", () => Effect.andThen(checkMetricsAccess, metrics.scrape))
      .handle("readyz", () =>
        sql<{ latest: number | null }>`SELECT max(migration_id) AS latest FROM effect_sql_migrations`.pipe(
          Effect.timeoutOrElse({ duration: Duration.seconds(2), orElse: () => Effect.fail(notAnswering) }),
          Effect.catchTag("SqlError", () => Effect.fail(notAnswering)),
          Effect.flatMap((rows) =>
            (rows[0]?.latest ?? 0) >= latestMigrationId
              ? Effect.succeed({ status: "ok" as const })
              : Effect.fail(new ServiceUnavailable({ message: "Database migrations are not applied yet." }))
          )
        ))
  })
)
