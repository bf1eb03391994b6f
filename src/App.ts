/**
 * The whole server as one Layer: database (migrated) → services → HTTP app + background fibers.
 * main.ts attaches it to a Bun server; the tests do the same on a random port.
 */
import { HttpRouter, HttpServer } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Accounts } from "./Admin/Accounts.js"
import { Auth } from "./Auth/Auth.js"
import { Secrets, ServerConfig } from "./Config.js"
import { HookCatalog } from "./Hooks/HookCatalog.js"
import { HttpAppLive } from "./Http.js"
import { Idempotency, IdempotencySweeperLive } from "./Idempotency/Idempotency.js"
import { CreditHistory } from "./Ledger/History.js"
import { Ledger } from "./Ledger/Ledger.js"
import { Usage } from "./Ledger/Usage.js"
import { WalletAlerts } from "./Ledger/Alerts.js"
import { LedgerSweeperLive } from "./Ledger/Sweeper.js"
import { Metrics } from "./Observability/Metrics.js"
import { MetricsListenerLive } from "./Observability/MetricsEndpoint.js"
import { TracingLive } from "./Observability/Tracing.js"
import { BlobStore } from "./Predictions/BlobStore.js"
import { Predictions } from "./Predictions/Predictions.js"
import { WorkSignal } from "./Predictions/WorkSignal.js"
import { ClipScorer } from "./Predictions/Scorer.js"
import { PredictionsSweeperLive } from "./Predictions/Sweeper.js"
import { WorkerLive } from "./Predictions/Worker.js"
import { RateLimits } from "./RateLimit/RateLimits.js"
import { SqlLive } from "./Sql.js"
import * as Server from "./System/Server.js"
import { DrainOnShutdownLive, type ShutdownGate } from "./System/Shutdown.js"
import { DeliverySweeperLive, WebhookDeliveries } from "./Webhooks/Deliveries.js"
import { DispatcherLive } from "./Webhooks/Dispatcher.js"
import { Webhooks } from "./Webhooks/Webhooks.js"

/** Domain services, each needing only the database and configuration. */
export const ServicesLive = Layer.mergeAll(
  Auth.Default,
  Ledger.Default,
  CreditHistory.Default,
  Usage.Default,
  WalletAlerts.Default,
  Idempotency.Default,
  Accounts.Default,
  HookCatalog.Default,
  Webhooks.Default,
  WebhookDeliveries.Default,
  RateLimits.Default,
  Metrics.Default,
  BlobStore.Default,
  WorkSignal.Default,
  Predictions.Default,
  Secrets.Live
)

/**
 * Fibers in the back yard: sweepers, workers, dispatchers; and the metrics listener (METRICS_PORT),
 * which like them belongs to the server process, not to the admin CLI's.
 */
export const BackgroundLive = Layer.mergeAll(
  LedgerSweeperLive,
  IdempotencySweeperLive,
  DispatcherLive,
  DeliverySweeperLive,
  WorkerLive,
  PredictionsSweeperLive,
  MetricsListenerLive
)

/** Bun's own body limit sits above the largest upload; each route enforces its own limit. */
const maxRequestBodySize = 300 * 1024 * 1024

export const ServerLive = Layer.unwrapEffect(
  Effect.map(ServerConfig, (config) =>
    Server.layer({ port: config.port, hostname: config.host, maxRequestBodySize, idleTimeout: 60 })
  )
)

/** What the application needs from its HTTP server layer (Server.layer provides it). */
export type ServerServices = HttpServer.HttpServer | HttpRouter.HttpRouter.DefaultServices | ShutdownGate

/**
 * The running application, given an HTTP server layer. The admin CLI serves the API in its own
 * process without the background fibers (it must not claim jobs or deliveries).
 */
export const appLayer = <E, R>(
  server: Layer.Layer<ServerServices, E, R>,
  options: {
    readonly background: boolean
    /** The clip scorer the workers use (tests and benchmarks swap it); default: ClipScorer.Default. */
    readonly scorer?: Layer.Layer<ClipScorer>
  } = { background: true }
) =>
  Layer.mergeAll(
    // Acquired after the HTTP app, so on shutdown it drains requests before the app is torn down.
    DrainOnShutdownLive.pipe(Layer.provideMerge(HttpAppLive.pipe(HttpServer.withLogAddress)), Layer.provideMerge(server)),
    options.background ? BackgroundLive.pipe(Layer.provide(options.scorer ?? ClipScorer.Default)) : Layer.empty
  ).pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(SqlLive),
    // Built first, so every span of the build and of the running app goes through it.
    Layer.provide(TracingLive)
  )
