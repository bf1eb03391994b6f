import { Duration, Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { readdirSync } from "node:fs"
import { HooklineApi } from "../Api.js"
import { ServiceUnavailable } from "../Errors.js"
import { Metrics } from "../Observability/Metrics.js"
import { BucketAccess } from "../Predictions/BucketCheck.js"
import { metricsAccessCheck } from "./MetricsEndpoint.js"
import { StartupWork } from "./Startup.js"
import { RateLimits } from "../RateLimit/RateLimits.js"
import { appliedMigration, isDatabaseUnavailable, migrationsDirectory } from "../Sql.js"

/** The highest migration id shipped with this build; /readyz wants the database at least there. */
const latestMigrationId = Math.max(
  0,
  ...readdirSync(migrationsDirectory).flatMap((file) => {
    const match = /^(\d+)_[^.]+\.(js|ts)$/.exec(file)
    return match === null ? [] : [Number(match[1])]
  })
)

const notAnswering = new ServiceUnavailable({ message: "The database does not answer within 2 seconds." })
const unreachable = new ServiceUnavailable({ message: "The database cannot be reached (connection refused, lost, or the server is starting or stopping)." })
const failing = new ServiceUnavailable({ message: "The database answers the readiness query with an error." })

export const SystemHandlers = HttpApiBuilder.group(HooklineApi, "system", (handlers) =>
  Effect.gen(function*() {
    const metrics = yield* Metrics
    const checkMetricsAccess = yield* metricsAccessCheck
    const rateLimits = yield* RateLimits
    const bucket = yield* BucketAccess
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("metrics", () => Effect.andThen(checkMetricsAccess, metrics.scrape))
      .handle("readyz", () =>
        Effect.gen(function*() {
          const pending = (yield* StartupWork).pending()
          if (pending !== null) return yield* new ServiceUnavailable({ message: `Starting: ${pending}.` })
          return yield* appliedMigration
        }).pipe(
          Effect.timeoutOrElse({ duration: Duration.seconds(2), orElse: () => Effect.fail(notAnswering) }),
          Effect.catchTag("SqlError", (error) => Effect.fail(isDatabaseUnavailable(error) ? unreachable : failing)),
          Effect.flatMap((latest) => {
            if (latest < latestMigrationId) {
              return Effect.fail(new ServiceUnavailable({ message: "Database migrations are not applied yet." }))
            }
            // The clip store's last access check (run by the background every S3_CHECK_INTERVAL).
            const storeProblem = bucket.problem()
            if (storeProblem !== null) return Effect.fail(new ServiceUnavailable({ message: storeProblem }))
            const degraded = rateLimits.degradation()
            const rate_limit_store = rateLimits.storeMode()
            return Effect.succeed(
              degraded === null ? { status: "ok" as const, rate_limit_store } : { status: "degraded" as const, degraded: [degraded], rate_limit_store }
            )
          })
        ))
  })
)
