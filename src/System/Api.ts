/** Liveness and readiness probes, and the Prometheus scrape endpoint. */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { InvalidApiKeyWire, RateLimitExceededWire, ServiceUnavailableWire } from "../Errors.js"
import { OnMetricsListener, Untraced } from "../RouteTraits.js"

export const Health = Schema.Struct({ status: Schema.Literal("ok") }).annotate({ identifier: "Health" })

/** Ready, possibly degraded: a dependency that is not required to serve is away (the process stays in rotation). */
export const Readiness = Schema.Struct({
  status: Schema.Literals(["ok", "degraded"]),
  degraded: Schema.optionalKey(Schema.Array(Schema.String).annotate({ description: "What is degraded and how, one line each." })),
  rate_limit_store: Schema.Literals(["redis", "local_fallback", "memory"]).annotate({
    description: "Where this process counts rate limits: `redis` (shared by every process), `local_fallback` (in " +
      "process, while Redis fails or is late), `memory` (in process: REDIS_URL is unset)."
  })
}).annotate({ identifier: "Readiness" })

const PrometheusText = Schema.String.pipe(
  HttpApiSchema.asText({ contentType: "text/plain; version=0.0.4; charset=utf-8" })
).annotate({
  description: "The Prometheus text exposition format 0.0.4: `# HELP` and `# TYPE` lines, then one " +
    "`name{label=\"value\"} number` sample a line."
})

export class SystemApi extends HttpApiGroup.make("system")
  .add(
    HttpApiEndpoint.get("healthz", "/healthz", { success: Health })
      .annotate(OpenApi.Summary, "Liveness: the process is up")
      .annotate(Untraced, true)
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz", { success: Readiness, error: ServiceUnavailableWire })
      .annotate(OpenApi.Summary, "Readiness: the database answers, migrations are applied, the clip store works")
      .annotate(Untraced, true)
      .annotate(
        OpenApi.Description,
        "503 with the reason while the database does not answer, or while the S3 bucket's last access check failed " +
          "(the message names the operation and the permission it needs). 200 `degraded` while the shared rate limit store " +
          "(Redis) fails or is late: requests are still served, limits counted per process (`rate_limit_store` says where)."
      )
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics", {
      success: PrometheusText,
      error: [InvalidApiKeyWire, RateLimitExceededWire]
    })
      .annotate(OpenApi.Summary, "Prometheus metrics of this process (Authorization: Bearer <METRICS_TOKEN>; 404 when it is unset)")
      .annotate(Untraced, true)
      .annotate(OnMetricsListener, true)
      .annotate(
        OpenApi.Description,
        "Request counts and latency histograms by route and status, credits charged by operation, prediction jobs by " +
          "state, queue depth and age, webhook attempts by outcome and database pool usage, in the Prometheus text format."
      )
  )
  .annotate(OpenApi.Title, "System")
{}
