/**
 * Metrics, kept with Effect's Metric module and served at GET /metrics in the Prometheus text
 * format (0.0.4). Counters and histograms are updated where things happen (requests, the
 * Ledger, the prediction worker, the webhook dispatcher); the gauges that describe the
 * database (jobs by state, queue depth and age) are read from it at most once per
 * METRICS_REFRESH_INTERVAL, whatever the scrape rate, by the refreshes the rooms that own those
 * tables register (`registerGauges`). Who may scrape is System/MetricsEndpoint.ts's.
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
import { ServerConfig } from "../Config.js"
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

const databaseUnavailable = counter(
  "hookline_database_unavailable_total",
  "Requests answered 503 because the database could not be reached or the connection was lost."
)

/** A request answered 503 because the database was away. */
export const recordDatabaseUnavailable = (): void => add(databaseUnavailable({}), 1)

const outcomeUnknown = counter(
  "hookline_outcome_unknown_total",
  "Requests answered 503 with their outcome unknown: the connection was lost at COMMIT (or while a charge was recorded) and the database could not be asked whether it committed."
)

/** A request answered 503 with its outcome unknown (its Idempotency-Key stays held, or its charge may have been taken). */
export const recordOutcomeUnknown = (): void => add(outcomeUnknown({}), 1)

const rateLimitFallback = gauge(
  "hookline_rate_limit_store_fallback",
  "1 while the shared rate limit store (Redis) does not answer and this process counts limits in process, else 0."
)
const rateLimitFallbacks = counter(
  "hookline_rate_limit_store_fallbacks_total",
  "Times this process fell back from the shared rate limit store (Redis) to its own in-process store."
)

/** The rate limiter's store switched: to the in-process fallback (true) or back to Redis (false). */
export const recordRateLimitFallback = (fallback: boolean): void => {
  add(rateLimitFallback({}), fallback ? 1 : 0)
  if (fallback) add(rateLimitFallbacks({}), 1)
}

const blobStoreReady = gauge(
  "hookline_blob_store_ready",
  "1 while the clip store passes its access check (write, read, list and delete under its prefixes), else 0."
)
const uploadWatchFailing = gauge(
  "hookline_upload_watch_failing_rounds",
  "Presigned uploads: rounds of the bucket watcher that failed in a row (0 while it works)."
)
const uploadWatchFailures = counter(
  "hookline_upload_watch_failures_total",
  "Presigned uploads: rounds of the bucket watcher that failed."
)

/** The clip store's access check passed (true) or did not. */
export const recordBlobStoreCheck = (ready: boolean): void => add(blobStoreReady({}), ready ? 1 : 0)

/** A round of the presigned-upload watcher ended, after `failedInARow` failed rounds (0: it worked). */
export const recordUploadWatch = (failedInARow: number): void => {
  add(uploadWatchFailing({}), failedInARow)
  if (failedInARow > 0) add(uploadWatchFailures({}), 1)
}

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

/** Prediction jobs by state, as counted in the database (states with none are 0). */
export const recordJobsByState = (counts: ReadonlyArray<{ readonly status: string; readonly n: number }>): void => {
  const byState = new Map(counts.map((row) => [row.status, row.n]))
  for (const state of predictionStates) add(jobsByState({ state }), byState.get(state) ?? 0)
}

/** A queue's depth and the age of its oldest waiting item, in seconds (0 when none). */
export const recordQueue = (queue: "predictions" | "webhooks", depth: number, oldestSeconds: number): void => {
  add(queueDepth({ queue }), depth)
  add(queueAge({ queue }), Math.max(0, oldestSeconds))
}

/** The pool limit the SQL client was built with (its options are kept as its config), when it says. */
const maxConnectionsOf = (client: Option.Option<PgClient.PgClient>): number | undefined =>
  Option.match(client, {
    onNone: () => undefined,
    onSome: ({ config }) => ("maxConnections" in config && typeof config.maxConnections === "number" ? config.maxConnections : undefined)
  })

/** What the metrics service offers: the scrape, and the rooms' database gauges registered for it. */
export interface MetricsService {
  /** The Prometheus exposition of every metric of this process, the database gauges refreshed first when due. */
  readonly scrape: Effect.Effect<string>
  /** A room's gauges, refreshed before a scrape (at most once per METRICS_REFRESH_INTERVAL). */
  readonly registerGauges: (refresh: Effect.Effect<void>) => Effect.Effect<void>
}

const make: Effect.Effect<MetricsService, Config.ConfigError> = Effect.gen(function*() {
  const config = yield* MetricsConfig
  const server = yield* ServerConfig
  const client = yield* Effect.serviceOption(PgClient.PgClient)
  // On a real PostgreSQL the shared pool and the catalog pages' own (PageClient, Sql.ts) split PG_MAX_CONNECTIONS.
  const maxConnections = Option.isSome(server.databaseUrl) && Option.isSome(client) ? server.pgMaxConnections : maxConnectionsOf(client)
  if (maxConnections !== undefined) add(poolMax({}), maxConnections)

  /** What the rooms registered: each reads its own tables and sets its gauges. */
  const refreshes: Array<Effect.Effect<void>> = []

  /** A room's gauges, refreshed before a scrape (at most once per METRICS_REFRESH_INTERVAL). */
  const registerGauges = (refresh: Effect.Effect<void>) => Effect.sync(() => void refreshes.push(refresh))

  const refreshDatabaseGauges = Effect.suspend(() =>
    Effect.forEach(refreshes, (refresh) =>
      refresh.pipe(
        // A database that does not answer leaves the last values; the scrape still answers.
        Effect.catchCause((cause) => Effect.logWarning("metrics: database gauges not refreshed", cause))
      ), { discard: true })
  )
  // Concurrent scrapes share one read; the next read happens once the interval has passed.
  const databaseGauges = yield* Effect.cachedWithTTL(refreshDatabaseGauges, config.refreshInterval)

  /** The Prometheus exposition of every metric of this process. */
  const scrape: Effect.Effect<string> = Effect.andThen(databaseGauges, PrometheusMetrics.format())

  return Metrics.of({ scrape, registerGauges })
})

export class Metrics extends Context.Service<Metrics, MetricsService>()("hookline/Metrics") {
  static readonly layer = Layer.effect(Metrics, make)
}
