/**
 * The HTTP server: `Bun.serve` handing every request to Effect's web handler
 * (`HttpEffect.toWebHandlerWith`, the one `HttpRouter.toWebHandler` uses), as an `HttpServer`
 * implementation, so the app is served with `HttpRouter.serve` like on any platform server.
 * `HttpListeners.listen` opens another port serving the same app (the metrics port).
 *
 * The adapter only does what needs Bun's own objects, and passes it to the request as its
 * per-request context (toWebHandler's second argument):
 * - the client's address (`server.requestIP`), which the request pipeline puts on the request,
 *   and the listener it came in on (src/System/Listen.ts);
 * - the trace sampling decision (it must be known before the server span would start): an
 *   unsampled request runs with `References.TracerEnabled` false and
 *   `HttpMiddleware.TracerDisabledWhen` true, so it makes no server span and no span below it;
 * - a client that hangs up interrupts its request DB_CANCEL_GRACE later (withHangUpGrace), except
 *   on a route whose handler streams its body (`StreamedBody`, src/RouteTraits.ts).
 * Everything else (request id, admission, limits, envelope, access log, metrics) is the
 * pipeline's (src/System/Pipeline.ts), a global middleware of the router; a body is bounded by
 * Effect itself once the route is known (src/System/Routes.ts).
 */
import { Config, Context, Duration, Effect, Layer, Option, Result, type Scope } from "effect"
import { HttpEffect, HttpServer, type HttpServerRequest } from "effect/http"
import * as NetAddress from "effect/net/NetAddress"
import { NodeHttpServer } from "@effect/platform-node"
import { ProcessesConfig, ServerConfig } from "../Config.js"
import { pathOnly } from "../Observability/Routes.js"
import { Sampling } from "../Observability/Sampling.js"
import { UnavailableRetryAfter, webEnvelope } from "./Envelope.js"
import { ListenerRole, ServerStartFailed } from "./Listen.js"
import { traitsBeforeRouting } from "./Routes.js"
import { ShutdownGate } from "./Shutdown.js"

export { ServerStartFailed } from "./Listen.js"

/** The client's address as Bun saw the connection (127.0.0.2 from a client bound there). */
export const ClientAddress = Context.Reference<string>("hookline/ClientAddress", { defaultValue: () => "unknown" })

/** The answer while the port is held but the app is not served: before the database is open, and while stopping. */
const notServing = (retryAfter: string) =>
  webEnvelope("ServiceUnavailable", "Hookline is starting or stopping; retry in a moment.", { "retry-after": retryAfter })

export interface ListenOptions {
  readonly port: number
  readonly hostname: string
  /** SO_REUSEPORT: set on the children of a supervisor (WEB_CONCURRENCY > 1), which share the port. */
  readonly reusePort?: boolean
}

export interface ServeOptions extends ListenOptions {
  /** Bun's own cap on any body: above the largest upload; each route enforces its own limit. */
  readonly maxRequestBodySize: number
  readonly idleTimeout: number
}

/** Another port serving the same app, stopped when its scope closes; gives the port it took. */
export class HttpListeners extends Context.Service<HttpListeners, {
  readonly listen: (options: ListenOptions & { readonly role: ListenerRole }) => Effect.Effect<number, ServerStartFailed, Scope.Scope>
}>()("hookline/HttpListeners") {}

type WebHandler = (request: Request, context: Context.Context<never>) => Promise<Response>

/**
 * The request as Effect sees it, whose hang-up interrupts the request `graceMs` later: a statement
 * that ends by then keeps its connection, where a cancel costs PostgreSQL two new backends (the
 * cancel's and the replacement connection's) and a load generator stopping with 32 requests in
 * flight stalled the server ~0.5 s. Shutdown interrupts a request at once all the same.
 */
const withHangUpGrace = (request: Request, graceMs: number): Request => {
  if (graceMs <= 0) return request
  const delayed = new AbortController()
  request.signal.addEventListener("abort", () => void setTimeout(() => delayed.abort(), graceMs), { once: true })
  return new Request(request, { signal: delayed.signal })
}

const make = (options: ServeOptions) =>
  Effect.gen(function*() {
    const { dbCancelGrace, shutdownFlushTimeout } = yield* ServerConfig
    const retryAfter = yield* UnavailableRetryAfter
    const graceMs = Duration.toMillis(dbCancelGrace)
    const sampling = yield* Sampling
    /** The app's handlers, once served: one for sampled requests, one with the tracer off for the rest. */
    let handlers: { readonly traced: WebHandler; readonly untraced: WebHandler } | null = null

    /** A Bun server on `listen.port` handing its requests to the app, stopped with the scope. */
    const open = (listen: ListenOptions, role: ListenerRole) =>
      Effect.acquireRelease(
        Effect.try({
          try: () =>
            Bun.serve({
              port: listen.port,
              hostname: listen.hostname,
              maxRequestBodySize: options.maxRequestBodySize,
              idleTimeout: options.idleTimeout,
              reusePort: listen.reusePort ?? false,
              fetch: (request, bun) => {
                if (handlers === null) return notServing(retryAfter)
                const path = pathOnly(request.url.slice(request.url.indexOf("/", request.url.indexOf("//") + 2)))
                const traits = traitsBeforeRouting(request.method, path)
                const traced = !traits.untraced && sampling.sampled(request.headers.get("traceparent"))
                const address = Context.make(ClientAddress, bun.requestIP(request)?.address ?? "unknown")
                const context = role === "api" ? address : Context.add(address, ListenerRole, role)
                // A streamed upload or import keeps its own request: cutting its body off must reach the socket.
                const forwarded = traits.streamedBody ? request : withHangUpGrace(request, graceMs)
                return (traced ? handlers.traced : handlers.untraced)(forwarded, context)
              }
            }),
          catch: (cause) => new ServerStartFailed({ port: listen.port, cause })
        }),
        // Stops listening, then waits for the answers already handed to Bun to be written (a process
        // that exits first resets those connections), for at most SHUTDOWN_FLUSH_TIMEOUT.
        (server) =>
          Effect.promise(() => server.stop()).pipe(
            Effect.timeoutOrElse({ duration: shutdownFlushTimeout, orElse: () => Effect.promise(() => server.stop(true)) })
          )
      )

    const server = yield* open(options, "api")
    const port = server.port ?? options.port
    // A host name (not an address) is reported as the unspecified address it listens on.
    const address = Result.getOrElse(
      NetAddress.inetAddressFromIpString(server.hostname ?? options.hostname, port),
      () => Result.getOrThrow(NetAddress.inetAddressFromIpString("0.0.0.0", port))
    )
    const httpServer = HttpServer.make({
      address,
      serve: (httpEffect, middleware) =>
        Effect.gen(function*() {
          // Flat base contexts: a request's few services are then cheap overlays on them, where a
          // deep context would be copied whole on each addition.
          const context = Context.makeUnsafe(new Map((yield* Effect.context<never>()).mapUnsafe))
          const toHandler = (base: Context.Context<never>) =>
            HttpEffect.toWebHandlerWith<never, HttpServerRequest.HttpServerRequest | Scope.Scope>(base)(httpEffect, middleware)
          handlers = { traced: toHandler(context), untraced: toHandler(Context.merge(context, sampling.untraced)) }
          yield* Effect.addFinalizer(() => Effect.sync(() => (handlers = null)))
        })
    })
    const listeners = HttpListeners.of({
      listen: ({ role, ...listen }) => Effect.map(open(listen, role), (extra) => extra.port ?? listen.port)
    })
    return Context.make(HttpServer.HttpServer, httpServer).pipe(Context.add(HttpListeners, listeners))
  })

/**
 * The server layer: HttpServer (serving whatever app HttpRouter.serve hands it), HttpListeners (the
 * same app on another port), the platform services handlers use, and the admission gate the
 * shutdown drain closes.
 */
export const layer = (options: ServeOptions) =>
  Layer.effectContext(make(options)).pipe(
    Layer.provideMerge(Layer.merge(ShutdownGate.layer, Sampling.layer)),
    Layer.merge(NodeHttpServer.layerHttpServices)
  )

/** For tests and the admin CLI: a server on a random loopback port. */
export const layerLoopback = (maxRequestBodySize = 300 * 1024 * 1024) =>
  layer({ port: 0, hostname: "127.0.0.1", maxRequestBodySize, idleTimeout: 60 })

/** The server on PORT and HOST; sharing the port with its siblings when a supervisor started it. */
export const layerFromConfig = Layer.unwrap(
  Effect.map(Config.all({ config: ServerConfig, processes: ProcessesConfig }), ({ config, processes }) =>
    layer({
      port: config.port,
      hostname: config.host,
      maxRequestBodySize: 300 * 1024 * 1024,
      idleTimeout: 60,
      reusePort: Option.isSome(processes.processIndex)
    })
  )
)
