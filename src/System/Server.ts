/**
 * The HTTP server: `Bun.serve` handing every request to Effect's web handler
 * (`HttpEffect.toWebHandlerWith`, the one `HttpRouter.toWebHandler` uses), as an `HttpServer`
 * implementation, so the app is served with `HttpRouter.serve` like on any platform server.
 *
 * The adapter only does what needs Bun's own objects, and passes it to the request as its
 * per-request context (toWebHandler's second argument):
 * - the client's address (`server.requestIP`), which the request pipeline puts on the request;
 * - the trace sampling decision (it must be known before the server span would start): an
 *   unsampled request runs with `References.TracerEnabled` false and
 *   `HttpMiddleware.TracerDisabledWhen` true, so it makes no server span and no span below it;
 * - a chunked JSON body is read here, counted while it streams and refused the moment it
 *   passes the limit (its size is unknown until then, and Effect would buffer it whole);
 * - a client that hangs up interrupts its request DB_CANCEL_GRACE later (withHangUpGrace).
 * Everything else (request id, admission, limits, envelope, access log, metrics) is the
 * pipeline's (src/System/Pipeline.ts), a global middleware of the router.
 */
import { Config, Context, Duration, Effect, Layer, Option, Result, type Scope } from "effect"
import { HttpEffect, HttpServer, type HttpServerRequest } from "effect/http"
import * as NetAddress from "effect/net/NetAddress"
import { NodeHttpServer } from "@effect/platform-node"
import { ProcessesConfig, ServerConfig } from "../Config.js"
import { Sampling } from "../Observability/Sampling.js"
import { pathOnly } from "../Observability/Routes.js"
import { UnavailableRetryAfter, webEnvelope } from "./Envelope.js"
import { ServerStartFailed } from "./Listen.js"
import { ShutdownGate } from "./Shutdown.js"

export { ServerStartFailed } from "./Listen.js"

/** The client's address as Bun saw the connection (127.0.0.2 from a client bound there). */
export const ClientAddress = Context.Reference<string>("hookline/ClientAddress", { defaultValue: () => "unknown" })

/** Why the adapter did not hand a request's body on: too large, or it broke off mid-way. */
export const BodyRefusal = Context.Reference<"too large" | "broken" | null>("hookline/BodyRefusal", {
  defaultValue: () => null
})

/** Routes whose bodies are streamed and bounded by their own limits, not the JSON limit. */
export const streamedBodyRoutes = [/^\/uploads\//, /^\/admin\/catalog\/hooks\/?$/]

/** The answer while the port is held but the app is not served: before the database is open, and while stopping. */
const notServing = (retryAfter: string) =>
  webEnvelope("ServiceUnavailable", "Hookline is starting or stopping; retry in a moment.", { "retry-after": retryAfter })

export interface ServeOptions {
  readonly port: number
  readonly hostname: string
  /** Bun's own cap on any body: above the largest upload; each route enforces its own limit. */
  readonly maxRequestBodySize: number
  readonly idleTimeout: number
  /** SO_REUSEPORT: set on the children of a supervisor (WEB_CONCURRENCY > 1), which share the port. */
  readonly reusePort?: boolean
}

/**
 * Reads a body of unknown length, counting bytes as they arrive. Returns the bytes; "too large"
 * the moment the count passes `limit` (the rest is never read: the connection is closed instead);
 * "broken" when the body ends in error (the client went away mid-body).
 */
const readBounded = async (body: ReadableStream<Uint8Array>, limit: number): Promise<Uint8Array<ArrayBuffer> | "too large" | "broken"> => {
  const reader = body.getReader()
  const chunks: Array<Uint8Array> = []
  let size = 0
  for (;;) {
    // A body that breaks off (the client went away mid-chunk) is answered, not thrown.
    const read = await reader.read().catch(() => null)
    if (read === null) return "broken"
    if (read.done) break
    size += read.value.byteLength
    if (size > limit) {
      void reader.cancel().catch(() => {})
      return "too large"
    }
    chunks.push(read.value)
  }
  const bytes = new Uint8Array(new ArrayBuffer(size))
  let offset = 0
  for (const chunk of chunks) {
    bytes.set(chunk, offset)
    offset += chunk.byteLength
  }
  return bytes
}

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
    const { maxJsonBodyBytes, dbCancelGrace, shutdownFlushTimeout } = yield* ServerConfig
    const retryAfter = yield* UnavailableRetryAfter
    const graceMs = Duration.toMillis(dbCancelGrace)
    const sampling = yield* Sampling
    /** The app's handlers, once served: one for sampled requests, one with the tracer off for the rest. */
    let handlers: { readonly traced: WebHandler; readonly untraced: WebHandler } | null = null

    /** A chunked body on a JSON route, read within the limit; the request as Effect will see it. */
    const bounded = async (request: Request, context: Context.Context<never>): Promise<[Request, Context.Context<never>]> => {
      const body = await readBounded(request.body!, maxJsonBodyBytes)
      if (typeof body === "string") {
        return [new Request(request.url, { method: request.method, headers: request.headers }), Context.add(context, BodyRefusal, body)]
      }
      return [new Request(request.url, { method: request.method, headers: request.headers, body, signal: request.signal }), context]
    }

    const server = yield* Effect.try({
      try: () =>
        Bun.serve({
          port: options.port,
          hostname: options.hostname,
          maxRequestBodySize: options.maxRequestBodySize,
          idleTimeout: options.idleTimeout,
          reusePort: options.reusePort ?? false,
          fetch: async (request, bun) => {
            if (handlers === null) return notServing(retryAfter)
            const path = pathOnly(request.url.slice(request.url.indexOf("/", request.url.indexOf("//") + 2)))
            const handler = sampling.sampled(path, request.headers.get("traceparent")) ? handlers.traced : handlers.untraced
            const context = Context.make(ClientAddress, bun.requestIP(request)?.address ?? "unknown")
            // A streamed upload or import keeps its own request: cutting its body off must reach the socket.
            const streamed = streamedBodyRoutes.some((route) => route.test(path))
            if (!streamed && request.body !== null && request.headers.get("content-length") === null) {
              const [forwarded, withRefusal] = await bounded(request, context)
              return handler(withHangUpGrace(forwarded, graceMs), withRefusal)
            }
            return handler(streamed ? request : withHangUpGrace(request, graceMs), context)
          }
        }),
      catch: (cause) => new ServerStartFailed({ port: options.port, cause })
    })
    // Stops listening, then waits for the answers already handed to Bun to be written (a process
    // that exits first resets those connections), for at most SHUTDOWN_FLUSH_TIMEOUT.
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => server.stop()).pipe(
        Effect.timeoutOrElse({ duration: shutdownFlushTimeout, orElse: () => Effect.promise(() => server.stop(true)) })
      )
    )

    const port = server.port ?? options.port
    // A host name (not an address) is reported as the unspecified address it listens on.
    const address = Result.getOrElse(
      NetAddress.inetAddressFromIpString(server.hostname ?? options.hostname, port),
      () => Result.getOrThrow(NetAddress.inetAddressFromIpString("0.0.0.0", port))
    )
    return HttpServer.make({
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
  })

/**
 * The server layer: HttpServer (serving whatever app HttpRouter.serve hands it), the
 * platform services handlers use, and the admission gate the shutdown drain closes.
 */
export const layer = (options: ServeOptions) =>
  Layer.effect(HttpServer.HttpServer, make(options)).pipe(
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
