/**
 * Metrics, kept with Effect's Metric module and served at GET /metrics in the Prometheus text
 * format (0.0.4). Counters and histograms are updated where things happen (requests, the
 * Ledger, the prediction worker, the webhook dispatcher); the gauges that describe the
 * database (jobs by state, queue depth and age) are read from it at most once per
 * METRICS_REFRESH_INTERVAL, whatever the scrape rate. Who may scrape is MetricsEndpoint.ts's.
 *
 * Every metric lives in the process-wide registry (`Metric.MetricRegistry`'s default, shared by
 * every context that does not provide its own), so a synchronous update with an empty context
 * and a scrape from any fiber see the same series.
 *
 * Labels hold bounded values only: route templates, statuses, operations, outcomes. Never an
 * account, a key or a raw path.
 */
import { PgClient } from "@effect/sql-pg"
import { Config, Context, Duration, Effect, Layer, Metric, Option } from "effect"
import { PrometheusMetrics } from "effect/observability"
import { JobsRepo } from "../Predictions/JobsRepo.js"
import { currentDate } from "../Repository.js"
import { orDieOnDb } from "../Sql.js"
import { WebhooksRepo } from "../Webhooks/Repo.js"
import { unmatchedRoute } from "./Routes.js"

export const MetricsConfig = Config.all({
  /** Bearer token GET /metrics requires; unset (or empty): /metrics is not served on the API port. */
  token: Config.option(Config.Redacted("METRICS_TOKEN")),
  /** A separate listener serving only GET /metrics (unset: none). */
  port: Config.option(Config.Int("METRICS_PORT")),
  host: Config.String("METRICS_HOST").pipe(Config.withDefault("127.0.0.1")),
  /** The database gauges are read at most this often; scrapes in between get the last values. */
  refreshInterval: Config.Duration("METRICS_REFRESH_INTERVAL").pipe(Config.withDefault(Duration.seconds(5)))
})
export type MetricsConfig = Config.Success<typeof MetricsConfig>

/** The content type of the Prometheus text exposition format. */
export const prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

/** Metric updates outside any fiber resolve the default registry through an empty context. */
const noContext = Context.empty()

/**
 * A metric family: one Effect metric per label set, made once and kept. (Metric.withAttributes
 * would map the context on every update, a measurable cost per request.)
 */
const family = <M>(make: (attributes: Record<string, string>) => M) => {
  const members = new Map<string, M>()
  return (attributes: Record<string, string>): M => {
    const id = Object.values(attributes).join("\u0000")
    let member = members.get(id)
    if (member === undefined) {
      member = make(attributes)
      members.set(id, member)
    }
    return member
  }
}

type Updatable = Metric.Metric<number, unknown>
const add = (metric: Updatable, value: number) => metric.updateUnsafe(value, noContext)

const latencyBoundaries = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const jobBoundaries = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

const counter = (name: string, description: string) =>
  family((attributes): Updatable => Metric.counter(name, { description, attributes, incremental: true }))
const histogram = (name: string, boundaries: ReadonlyArray<number>, description: string) =>
  family((attributes): Updatable => Metric.histogram(name, { description, attributes, boundaries }))
const gauge = (name: string, description: string) =>
  family((attributes): Updatable => Metric.gauge(name, { description, attributes }))

const httpRequests = counter(
  "http_server_requests_total",
  "HTTP requests answered, by route template, method and status."
)
const httpDuration = histogram(
  "http_server_request_duration_seconds",
  latencyBoundaries,
  "Time from request to response, by route template, method and status."
)

/** The request counter and histogram of each route, method and status, resolved once. */
const requestInstruments = new Map<string, { readonly count: Updatable; readonly duration: Updatable }>()

/**
 * One answered request, recorded synchronously once its response is known. `route` is the
 * template the router matched (`HttpRouter.RouteContext`'s `route.path`, e.g. "/v1/hooks/:id"),
 * or undefined when no route took the request (counted as "unmatched"); never a raw path.
 */
export const recordRequestNow = (route: string | undefined, method: string, status: number, seconds: number): void => {
  const template = route ?? unmatchedRoute
  const id = `${template} ${method} ${status}`
  let instruments = requestInstruments.get(id)
  if (instruments === undefined) {
    const attributes = { route: template, method, status: String(status) }
    instruments = { count: httpRequests(attributes), duration: httpDuration(attributes) }
    requestInstruments.set(id, instruments)
  }
  add(instruments.count, 1)
  add(instruments.duration, seconds)
}

const creditsCharged = counter(
  "hookline_credits_charged_total",
  "Credits taken (settled holds and charges taken at once), by operation (search, list, hook, prediction)."
)
const holdsResolved = counter(
  "hookline_holds_resolved_total",
  "Holds resolved, by operation and outcome (settled, refunded, voided)."
)

/** Credits taken at once, with no hold (Ledger.charge). */
export const recordCreditsCharged = (operation: string, charged: number) =>
  Effect.sync(() => add(creditsCharged({ operation }), charged))

/** A hold resolved by the Ledger, with the credits it finally took. */
export const recordHoldResolved = (operation: string, outcome: "settled" | "refunded" | "voided", charged: number) =>
  Effect.sync(() => {
    add(holdsResolved({ operation, outcome }), 1)
    if (charged > 0) add(creditsCharged({ operation }), charged)
  })

const jobRuns = counter(
  "hookline_job_runs_total",
  "Prediction job runs finished, by outcome (succeeded, failed, lost: another worker took the job over)."
)
const jobDuration = histogram(
  "hookline_job_run_duration_seconds",
  jobBoundaries,
  "Time a worker spent on one prediction job run, by outcome."
)

/** One run of a prediction job by a worker. */
export const recordJobRun = (outcome: "succeeded" | "failed" | "lost", seconds: number) =>
  Effect.sync(() => {
    add(jobRuns({ outcome }), 1)
    add(jobDuration({ outcome }), seconds)
  })

const webhookAttempts = counter(
  "hookline_webhook_attempts_total",
  "Webhook delivery attempts, by outcome: delivered (2xx), rejected (another status), unreachable (no HTTP answer)."
)
const webhookDuration = histogram(
  "hookline_webhook_attempt_duration_seconds",
  latencyBoundaries,
  "Time one webhook delivery attempt took, by outcome."
)

export type WebhookOutcome = "delivered" | "rejected" | "unreachable"

/** The outcome of an attempt that got `statusCode` (null: no HTTP answer). */
export const webhookOutcome = (statusCode: number | null): WebhookOutcome =>
  statusCode === null ? "unreachable" : statusCode >= 200 && statusCode < 300 ? "delivered" : "rejected"

/** One webhook delivery attempt (test deliveries included). */
export const recordWebhookAttempt = (outcome: WebhookOutcome, seconds: number) =>
  Effect.sync(() => {
    add(webhookAttempts({ outcome }), 1)
    add(webhookDuration({ outcome }), seconds)
  })

// Read from the database, at most once per refresh interval.
const jobsByState = gauge("hookline_jobs", "Prediction jobs in the database, by state.")
const queueDepth = gauge(
  "hookline_queue_depth",
  "Work waiting: queued prediction jobs, and webhook deliveries pending (due or scheduled)."
)
const queueAge = gauge(
  "hookline_queue_oldest_age_seconds",
  "Age of the oldest waiting item: the longest-queued job, the most overdue webhook delivery (0 when none)."
)
// The driver's pool reports no usage (open, idle, waiting), only the limit it was built with.
const poolMax = gauge("hookline_db_pool_max_connections", "Database pool size limit of this process.")

const predictionStates = ["awaiting_upload", "queued", "running", "succeeded", "failed"] as const

/** The pool limit the SQL client was built with (its options are kept as its config), when it says. */
const maxConnectionsOf = (client: Option.Option<PgClient.PgClient>): number | undefined =>
  Option.match(client, {
    onNone: () => undefined,
    onSome: ({ config }) => ("maxConnections" in config && typeof config.maxConnections === "number" ? config.maxConnections : undefined)
  })

const make = Effect.gen(function*() {
  const jobsRepo = yield* JobsRepo
  const webhooksRepo = yield* WebhooksRepo
  const config = yield* MetricsConfig
  const maxConnections = maxConnectionsOf(yield* Effect.serviceOption(PgClient.PgClient))
  if (maxConnections !== undefined) add(poolMax({}), maxConnections)

  const readQueues = Effect.gen(function*() {
    const now = yield* currentDate
    const oldestQueued = yield* jobsRepo.oldestQueuedSeconds(now)
    const outbox = yield* webhooksRepo.outboxBacklog(now)
    return {
      jobs: yield* jobsRepo.countByStatus(),
      deliveries: outbox.pending,
      oldestQueuedSeconds: Math.max(0, oldestQueued),
      oldestDueSeconds: Math.max(0, outbox.oldest_due_ms / 1000)
    }
  }).pipe(orDieOnDb)

  const refreshDatabaseGauges = Effect.map(readQueues, (queues) => {
    const counts = new Map(queues.jobs.map((row) => [row.status, row.n]))
    for (const state of predictionStates) add(jobsByState({ state }), counts.get(state) ?? 0)
    add(queueDepth({ queue: "predictions" }), counts.get("queued") ?? 0)
    add(queueDepth({ queue: "webhooks" }), queues.deliveries)
    add(queueAge({ queue: "predictions" }), queues.oldestQueuedSeconds)
    add(queueAge({ queue: "webhooks" }), queues.oldestDueSeconds)
  }).pipe(
    // A database that does not answer leaves the last values; the scrape still answers.
    Effect.catchCause((cause) => Effect.logWarning("metrics: database gauges not refreshed", cause))
  )
  // Concurrent scrapes share one read; the next read happens once the interval has passed.
  const databaseGauges = yield* Effect.cachedWithTTL(refreshDatabaseGauges, config.refreshInterval)

  /** The Prometheus exposition of every metric of this process. */
  const scrape: Effect.Effect<string> = Effect.andThen(databaseGauges, PrometheusMetrics.format())

  return { config, scrape } as const
})

export class Metrics extends Context.Service<Metrics, Effect.Success<typeof make>>()("hookline/Metrics") {
  static readonly layerWithoutDependencies = Layer.effect(Metrics, make)
  static readonly layer = Metrics.layerWithoutDependencies.pipe(
    Layer.provide(Layer.mergeAll(JobsRepo.layer, WebhooksRepo.layer))
  )
}
