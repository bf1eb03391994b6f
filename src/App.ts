/**
 * The whole server as one Layer: database (migrated) → services → HTTP app + background fibers.
 * main.ts attaches it to a Bun server; the tests do the same on a random port.
 */
import { HttpRouter, HttpServer } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
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
import { TracingLive } from "./Observability/Tracing.js"
import { BlobStore } from "./Predictions/BlobStore.js"
import { Predictions, WorkSignal } from "./Predictions/Predictions.js"
import { ClipScorer } from "./Predictions/Scorer.js"
import { PredictionsSweeperLive } from "./Predictions/Sweeper.js"
import { WorkerLive } from "./Predictions/Worker.js"
import { RateLimits } from "./RateLimit/RateLimits.js"
import { SqlLive } from "./Sql.js"
import { DrainOnShutdownLive, ShutdownGate } from "./System/Shutdown.js"
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
  ShutdownGate.Default,
  Secrets.Live
)

/** Fibers in the back yard: sweepers, workers, dispatchers. */
export const BackgroundLive = Layer.mergeAll(LedgerSweeperLive, IdempotencySweeperLive, DispatcherLive, DeliverySweeperLive, WorkerLive, PredictionsSweeperLive)

/** Bun's own body limit sits above the largest upload; each route enforces its own limit. */
const maxRequestBodySize = 300 * 1024 * 1024

export const ServerLive = Layer.unwrapEffect(
  Effect.map(ServerConfig, (config) =>
    BunHttpServer.layer({ port: config.port, hostname: config.host, maxRequestBodySize, idleTimeout: 60 })
  )
)

/**
 * The running application, given an HTTP server layer. The admin CLI serves the API in its own
 * process without the background fibers (it must not claim jobs or deliveries).
 */
export const appLayer = <E, R>(
  server: Layer.Layer<HttpServer.HttpServer | HttpRouter.HttpRouter.DefaultServices, E, R>,
  options: {
    readonly background: boolean
    /** The clip scorer the workers use (tests and benchmarks swap it); default: ClipScorer.Default. */
    readonly scorer?: Layer.Layer<ClipScorer>
  } = { background: true }
) =>
  Layer.mergeAll(
    // Acquired after the HTTP app, so on shutdown it drains requests before the app is torn down.
    DrainOnShutdownLive.pipe(Layer.provideMerge(HttpAppLive.pipe(HttpServer.withLogAddress, Layer.provide(server)))),
    options.background ? BackgroundLive.pipe(Layer.provide(options.scorer ?? ClipScorer.Default)) : Layer.empty
  ).pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(SqlLive),
    // Built first, so every span of the build and of the running app goes through it.
    Layer.provide(TracingLive)
  )
