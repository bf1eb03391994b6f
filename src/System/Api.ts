/** Liveness and readiness probes, and the Prometheus scrape endpoint. */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { InvalidApiKeyWire, RateLimitExceededWire, ServiceUnavailableWire } from "../Errors.js"

export const Health = Schema.Struct({ status: Schema.Literal("ok") }).annotate({ identifier: "Health" })

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
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz", { success: Health, error: ServiceUnavailableWire })
      .annotate(OpenApi.Summary, "Readiness: the database answers and migrations are applied")
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics", {
      success: PrometheusText,
      error: [InvalidApiKeyWire, RateLimitExceededWire]
    })
      .annotate(OpenApi.Summary, "Prometheus metrics of this process (Authorization: Bearer <METRICS_TOKEN>; 404 when it is unset)")
      .annotate(
        OpenApi.Description,
        "Request counts and latency histograms by route and status, credits charged by operation, prediction jobs by " +
          "state, queue depth and age, webhook attempts by outcome and database pool usage, in the Prometheus text format."
      )
  )
  .annotate(OpenApi.Title, "System")
{}
