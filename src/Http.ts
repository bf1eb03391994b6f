/**
 * Server wiring: the API's routes (every group's handlers, the bearer middleware and the
 * envelope for framework errors, src/System/Envelope.ts), /openapi.json, /docs, each with the
 * route middleware that applies its endpoint's traits (src/System/Routes.ts), and the request
 * pipeline around them all (src/System/Pipeline.ts), served by the HttpServer in context
 * (src/System/Server.ts) on each of its listeners.
 */
import { Layer } from "effect"
import { HttpRouter } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { AdminHandlers } from "./Admin/Http.js"
import { HooklineApi } from "./Api.js"
import { AuthenticationLive } from "./Auth/Http.js"
import { HooksHandlers } from "./Hooks/Http.js"
import { IdempotencyKeysLive } from "./Idempotency/Http.js"
import { WalletHandlers } from "./Ledger/Http.js"
import { PredictHandlers, UploadHandlers } from "./Predictions/Http.js"
import { DocsLive } from "./System/Docs.js"
import { ApiErrors, ApiErrorsLive } from "./System/Envelope.js"
import { SystemHandlers } from "./System/Http.js"
import { RequestPipelineLive } from "./System/Pipeline.js"
import { IndexedRouterLive, RouteIndex, RouteTraitsLive } from "./System/Routes.js"
import { WebhooksHandlers } from "./Webhooks/Http.js"

export { describeDecodeError } from "./System/Envelope.js"

export const ApiLive = HttpApiBuilder.layer(HooklineApi, { openapiPath: "/openapi.json" }).pipe(
  Layer.provide([
    WalletHandlers,
    HooksHandlers,
    PredictHandlers,
    UploadHandlers,
    WebhooksHandlers,
    AdminHandlers,
    SystemHandlers
  ]),
  Layer.provide(AuthenticationLive),
  Layer.provide(IdempotencyKeysLive),
  Layer.provide(Layer.succeed(ApiErrors, ApiErrorsLive))
)

/** Every route, registered through the indexed router with the route middleware. */
const RoutesLive = Layer.mergeAll(ApiLive, DocsLive).pipe(Layer.provide([RouteTraitsLive.layer, IndexedRouterLive]))

/** Everything the HTTP server serves, with the request pipeline around it. */
export const HttpAppLive = HttpRouter.serve(Layer.mergeAll(RoutesLive, RequestPipelineLive).pipe(Layer.provide(RouteIndex.layer)), {
  // The pipeline writes the access log; the router's own logger would log each request twice.
  disableLogger: true,
  disableListenLog: true
})
