/**
 * Metrics, kept with Effect's Metric module and served at GET /metrics in the Prometheus text
 * format (0.0.4). Counters and histograms are updated where things happen (requests, the
 * Ledger, the prediction worker, the webhook dispatcher); the gauges that describe the
 * database (jobs by state, queue depth and age) are read from it at most once per
 * METRICS_REFRESH_INTERVAL, whatever the scrape rate, and pool usage at every scrape.
 * Who may scrape is MetricsEndpoint.ts's.
 *
 * Labels hold bounded values only: route templates, statuses, operations, outcomes. Never an
 * account, a key or a raw path.
 */
import { Config, Duration, Effect, Metric, MetricBoundaries, MetricKey, MetricLabel } from "effect"
import { JobsRepo } from "../Predictions/JobsRepo.js"
import { currentDate } from "../Repository.js"
import { DbPool, orDieOnDb } from "../Sql.js"
import { WebhooksRepo } from "../Webhooks/Repo.js"
import { renderPrometheus } from "./Prometheus.js"

export const MetricsConfig = Config.all({
  /** Bearer token GET /metrics requires; unset (or empty): /metrics is not served on the API port. */
  token: Config.option(Config.redacted("METRICS_TOKEN")),
  /** A separate listener serving only GET /metrics (unset: none). */
  port: Config.option(Config.integer("METRICS_PORT")),
  host: Config.string("METRICS_HOST").pipe(Config.withDefault("127.0.0.1")),
  /** The database gauges are read at most this often; scrapes in between get the last values. */
  refreshInterval: Config.duration("METRICS_REFRESH_INTERVAL").pipe(Config.withDefault(Duration.seconds(5)))
})
export type MetricsConfig = Config.Config.Success<typeof MetricsConfig>

const labels = (tags: Record<string, string>) => Object.entries(tags).map(([key, value]) => MetricLabel.make(key, value))

/**
 * A metric family: one Effect metric per label set, made once and kept. (Metric.tagged would
 * build and hash a new metric key on every update, a measurable cost per request.)
 */
const family = <M>(make: (tags: ReadonlyArray<MetricLabel.MetricLabel>) => M) => {
  const members = new Map<string, M>()
  return (tags: Record<string, string>): M => {
    const id = Object.values(tags).join("\u0000")
    let member = members.get(id)
    if (member === undefined) {
      member = make(labels(tags))
      members.set(id, member)
    }
    return member
  }
}

interface Updatable {
  readonly unsafeUpdate: (input: number, extraTags: ReadonlyArray<MetricLabel.MetricLabel>) => void
}
const noTags: ReadonlyArray<MetricLabel.MetricLabel> = []
const add = (metric: Updatable, value: number) => metric.unsafeUpdate(value, noTags)

const latencyBoundaries = MetricBoundaries.fromIterable([
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
])
const jobBoundaries = MetricBoundaries.fromIterable([0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300])

const counter = (name: string, description: string) =>
  family((tags) => Metric.fromMetricKey(MetricKey.taggedWithLabels(MetricKey.counter(name, { description, incremental: true }), tags)))
const histogram = (name: string, boundaries: MetricBoundaries.MetricBoundaries, description: string) =>
  family((tags) => Metric.fromMetricKey(MetricKey.taggedWithLabels(MetricKey.histogram(name, boundaries, description), tags)))
const gauge = (name: string, description: string) =>
  family((tags) => Metric.fromMetricKey(MetricKey.taggedWithLabels(MetricKey.gauge(name, { description }), tags)))

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
 * One answered request, recorded synchronously by the front door (src/System/Server.ts).
 * `route` is a template from Routes.routeOf, never a raw path.
 */
export const recordRequestNow = (route: string, method: string, status: number, seconds: number): void => {
  const id = `${route} ${method} ${status}`
  let instruments = requestInstruments.get(id)
  if (instruments === undefined) {
    const tags = { route, method, status: String(status) }
    instruments = { count: httpRequests(tags), duration: httpDuration(tags) }
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

// Read from the database (at most once per refresh interval) and the pool.
const jobsByState = gauge("hookline_jobs", "Prediction jobs in the database, by state.")
const queueDepth = gauge(
  "hookline_queue_depth",
  "Work waiting: queued prediction jobs, and webhook deliveries pending (due or scheduled)."
)
const queueAge = gauge(
  "hookline_queue_oldest_age_seconds",
  "Age of the oldest waiting item: the longest-queued job, the most overdue webhook delivery (0 when none)."
)
const poolConnections = gauge(
  "hookline_db_pool_connections",
  "Database pool connections of this process, by state (open, idle, in_use) and waiting requests (waiting)."
)
const poolMax = gauge("hookline_db_pool_max_connections", "Database pool size limit of this process.")

const predictionStates = ["awaiting_upload", "queued", "running", "succeeded", "failed"] as const

export class Metrics extends Effect.Service<Metrics>()("hookline/Metrics", {
  effect: Effect.gen(function*() {
    const pool = yield* DbPool
    const jobsRepo = yield* JobsRepo
    const config = yield* MetricsConfig
    const webhooksRepo = yield* WebhooksRepo

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
      Effect.catchAllCause((cause) => Effect.logWarning("metrics: database gauges not refreshed", cause))
    )
    // Concurrent scrapes share one read; the next read happens once the interval has passed.
    const databaseGauges = yield* Effect.cachedWithTTL(refreshDatabaseGauges, config.refreshInterval)

    const refreshPoolGauges = Effect.sync(() => {
      add(poolConnections({ state: "open" }), pool.totalCount)
      add(poolConnections({ state: "idle" }), pool.idleCount)
      add(poolConnections({ state: "in_use" }), pool.totalCount - pool.idleCount)
      add(poolConnections({ state: "waiting" }), pool.waitingCount)
      add(poolMax({}), pool.options.max ?? 10)
    })

    /** The Prometheus exposition of every metric of this process. */
    const scrape = databaseGauges.pipe(
      Effect.zipRight(refreshPoolGauges),
      Effect.zipRight(Effect.map(Metric.snapshot, renderPrometheus))
    )

    return { config, scrape } as const
  }),
  dependencies: [JobsRepo.Default, WebhooksRepo.Default]
}) {}
