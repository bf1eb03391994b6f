/**
 * The whole server as one Layer: database (migrated) → services → HTTP app + background fibers.
 * main.ts attaches it to a Bun server; the tests do the same on a random port.
 */
import { Layer } from "effect"
import { HttpServer } from "effect/http"
import { Accounts } from "./Admin/Accounts.js"
import { Auth } from "./Auth/Auth.js"
import { Secrets } from "./Config.js"
import { HookCatalog } from "./Hooks/HookCatalog.js"
import { HttpAppLive } from "./Http.js"
import { Idempotency, IdempotencySweeperLive } from "./Idempotency/Idempotency.js"
import { WalletAlerts } from "./Ledger/Alerts.js"
import { KeyBudgets } from "./Ledger/Budgets.js"
import { CreditHistory } from "./Ledger/History.js"
import { Ledger } from "./Ledger/Ledger.js"
import { LedgerSweeperLive } from "./Ledger/Sweeper.js"
import { Usage } from "./Ledger/Usage.js"
import { Metrics } from "./Observability/Metrics.js"
import { MetricsListenerLive } from "./System/MetricsEndpoint.js"
import { TracingLive } from "./Observability/Tracing.js"
import { PublicPathsLive } from "./System/Routes.js"
import { BlobStore } from "./Predictions/BlobStore.js"
import { PredictionGaugesLive } from "./Predictions/Gauges.js"
import { PredictionJobs } from "./Predictions/Jobs.js"
import { PredictionsSweeperLive } from "./Predictions/Sweeper.js"
import { PredictionUploads } from "./Predictions/Uploads.js"
import { WorkerLive } from "./Predictions/Worker.js"
import { WorkSignal } from "./Predictions/WorkSignal.js"
import { RateLimits } from "./RateLimit/RateLimits.js"
import { SqlLive } from "./Sql.js"
import * as Server from "./System/Server.js"
import { DrainOnShutdownLive, type ShutdownGate } from "./System/Shutdown.js"
import { DeliverySweeperLive, WebhookDeliveries } from "./Webhooks/Deliveries.js"
import { DispatcherLive } from "./Webhooks/Dispatcher.js"
import { WebhookGaugesLive } from "./Webhooks/Gauges.js"
import { Webhooks } from "./Webhooks/Webhooks.js"

/** Domain services, each needing only the database and configuration. */
export const ServicesLive = Layer.mergeAll(
  Auth.layer,
  Ledger.layer,
  CreditHistory.layer,
  Usage.layer,
  WalletAlerts.layer,
  KeyBudgets.layer,
  Idempotency.layer,
  Accounts.layer,
  HookCatalog.layer,
  Webhooks.layer,
  WebhookDeliveries.layer,
  RateLimits.layer,
  // Each room registers the gauges of its own tables with the one Metrics service.
  Layer.mergeAll(PredictionGaugesLive, WebhookGaugesLive).pipe(Layer.provideMerge(Metrics.layer)),
  BlobStore.layer,
  WorkSignal.layer,
  PredictionJobs.layer,
  PredictionUploads.layer,
  Secrets.layer
)

/**
 * Fibers in the back yard: sweepers, workers, dispatchers; and the metrics listener (METRICS_PORT),
 * which like them belongs to the server process, not to the admin CLI's. The workers need a
 * ClipScorer, left to the caller: ClipScorer.layer in production, a fake in tests and benches.
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

/** The server on PORT and HOST. */
export const ServerLive = Server.layerFromConfig

/** What the application needs from its HTTP server layer (Server.layer provides it). */
export type ServerServices = Layer.Success<ReturnType<typeof Server.layer>> | HttpServer.HttpServer | ShutdownGate

/** The HTTP app, its services and the database, plus `background` (fibers, or nothing). */
const withServices = <E, R, EB, RB>(server: Layer.Layer<ServerServices, E, R>, background: Layer.Layer<never, EB, RB>) =>
  Layer.mergeAll(
    // Acquired after the HTTP app, so on shutdown it drains requests before the app is torn down.
    DrainOnShutdownLive.pipe(Layer.provideMerge(HttpAppLive.pipe(HttpServer.withLogAddress))),
    background
  ).pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(SqlLive),
    // Listening before the database opens: a taken port is reported at once, and until the app
    // is served every request is answered 503 (Server.ts). Released last, after the database.
    Layer.provideMerge(server),
    // Built first, so every span of the build and of the running app goes through it.
    Layer.provide(TracingLive.pipe(Layer.provide(PublicPathsLive)))
  )

/**
 * The running application, given an HTTP server layer. Its workers score clips with the
 * ClipScorer the caller provides: `appLayer(server).pipe(Layer.provide(ClipScorer.layer))`.
 */
export const appLayer = <E, R>(server: Layer.Layer<ServerServices, E, R>) => withServices(server, BackgroundLive)

/** The API without the background fibers: the admin CLI serves it in its own process (it must not claim jobs or deliveries). */
export const apiOnlyLayer = <E, R>(server: Layer.Layer<ServerServices, E, R>) => withServices(server, Layer.empty)
