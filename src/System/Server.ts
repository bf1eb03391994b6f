/**
 * The HTTP server: `Bun.serve` behind one front door written in plain JavaScript, serving the
 * HttpApi app (an `HttpServer` implementation, like `BunHttpServer.layer`, so the rest of the
 * wiring is unchanged).
 *
 * Everything a request needs before routing is done here, once, without the Effect runtime:
 * the request id, admission (the shutdown gate is a counter), the request-head limit, control
 * characters in the path, the JSON body limit (a chunked body is counted while it streams and
 * refused the moment it passes the limit, so nothing outside the upload and import routes ever
 * holds more than the limit), the trace sampling decision, and after the answer the access log,
 * the request metrics and the X-Request-Id header. Requests that are not sampled run on a
 * runtime whose tracer is off, so they create no span objects at all (src/Observability/Sampling.ts).
 */
import { HttpApp, HttpMiddleware, HttpServer, HttpServerError, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import type { Server as BunServer } from "bun"
import { Config, Context, Effect, FiberRef, FiberRefs, Layer, LogLevel, Runtime, type Types } from "effect"
import { ServerConfig } from "../Config.js"
import { RequestId } from "../Errors.js"
import { newId } from "../Ids.js"
import { type RequestSummary, Sampling, type TraceSampler } from "../Observability/Sampling.js"
import { recordRequestNow } from "../Observability/Metrics.js"
import { pathOnly, publicPath, routeOf, untracedPaths } from "../Observability/Routes.js"
import { ShutdownGate } from "./Shutdown.js"
import { HeaderLimitConfig, hasControlCharacterInPath, requestHeadBytesAtMost } from "./InputGuards.js"

/** The client's address, looked up only when asked (the failed-authentication limit). */
export class ClientAddress extends Context.Reference<ClientAddress>()("hookline/ClientAddress", {
  defaultValue: (): (() => string) => () => "unknown"
}) {}

/** Routes whose bodies are streamed and bounded by their own limits, not the JSON limit. */
const streamedBodyRoutes = [/^\/uploads\//, /^\/admin\/catalog\/hooks\/?$/]

export interface ServeOptions {
  readonly port: number
  readonly hostname: string
  /** Bun's own cap on any body: above the largest upload; each route enforces its own limit. */
  readonly maxRequestBodySize: number
  readonly idleTimeout: number
}

const FrontDoorConfig = Config.all({
  headLimit: HeaderLimitConfig,
  maxJsonBodyBytes: Config.map(ServerConfig, (config) => config.maxJsonBodyBytes)
})

const incomingRequestId = /^[A-Za-z0-9_.:-]{1,128}$/

/** An answer the front door gives itself, in the contract's envelope. */
const refusal = (status: number, type: string, message: string, requestId: string, close: boolean) =>
  new Response(JSON.stringify({ error: { type, message, request_id: requestId } }), {
    status,
    headers: {
      "content-type": "application/json",
      ...(close ? { "connection": "close" } : {}),
      ...(status === 503 ? { "retry-after": "1" } : {})
    }
  })

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

/** The runtime unsampled requests run on: the tracer off, and the server span skipped. */
const untracedRuntime = (runtime: Runtime.Runtime<never>): Runtime.Runtime<never> =>
  runtime.pipe(
    Runtime.setFiberRef(FiberRef.currentTracerEnabled, false),
    Runtime.setFiberRef(HttpMiddleware.currentTracerDisabledWhen, () => true)
  )

/** Where each request's answer goes: set when it is handed to the app, read once. */
const resolvers = new WeakMap<HttpServerRequest.HttpServerRequest, (response: Response) => void>()

/**
 * A web handler running `app` on `runtime`: like HttpApp.toWebHandlerRuntime, with the
 * per-request services (request id, client address) put straight into the fiber's context.
 */
const webHandler = (runtime: Runtime.Runtime<never>, app: Effect.Effect<void, never, HttpServerRequest.HttpServerRequest>) => {
  const base = runtime.context.unsafeMap
  // Its context is replaced before each request is forked (the request's own services added).
  const requestRuntime: Types.Mutable<Runtime.Runtime<HttpServerRequest.HttpServerRequest>> = Runtime.make({
    context: Context.unsafeMake<HttpServerRequest.HttpServerRequest>(base),
    fiberRefs: runtime.fiberRefs,
    runtimeFlags: runtime.runtimeFlags
  })
  const run = Runtime.runFork(requestRuntime)
  return (webRequest: Request, requestId: string, clientAddress: () => string): Promise<Response> =>
    new Promise((resolve) => {
      const serverRequest = HttpServerRequest.fromWeb(webRequest)
      resolvers.set(serverRequest, resolve)
      const services = new Map(base)
      services.set(HttpServerRequest.HttpServerRequest.key, serverRequest)
      services.set(RequestId.key, requestId)
      services.set(ClientAddress.key, clientAddress)
      requestRuntime.context = Context.unsafeMake<HttpServerRequest.HttpServerRequest>(services)
      const fiber = run(app)
      webRequest.signal.addEventListener("abort", () => fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId), { once: true })
    })
}

/** Writes the app's answer: the web Response goes to the promise the front door awaits. */
const handleResponse = (runtime: Runtime.Runtime<never>) =>
  (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse) =>
    Effect.sync(() => {
      const resolve = resolvers.get(request)
      resolvers.delete(request)
      resolve?.(HttpServerResponse.toWeb(HttpApp.unsafeEjectStreamScope(response), { withoutBody: request.method === "HEAD", runtime }))
    })

const make = (options: ServeOptions) =>
  Effect.gen(function*() {
    const config = yield* FrontDoorConfig
    const admission = yield* ShutdownGate
    const sampling = yield* Sampling
    let handler: ((request: Request, server: BunServer<undefined>) => Promise<Response>) | null = null
    const server = Bun.serve({
      port: options.port,
      hostname: options.hostname,
      maxRequestBodySize: options.maxRequestBodySize,
      idleTimeout: options.idleTimeout,
      fetch: (request, bunServer) =>
        handler === null ? new Response("not ready", { status: 503, headers: { "retry-after": "1" } }) : handler(request, bunServer)
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => server.stop()))

    return HttpServer.make({
      address: { _tag: "TcpAddress", port: server.port ?? options.port, hostname: server.hostname ?? options.hostname },
      serve: (httpApp, middleware) =>
        Effect.gen(function*() {
          const runtime = yield* Effect.runtime<never>()
          const app = HttpApp.toHandled(httpApp, handleResponse(runtime), middleware)
          const traced = webHandler(runtime, app)
          const untraced = webHandler(untracedRuntime(runtime), app)
          const logAccess = accessLogger(runtime)
          handler = (request, bunServer) =>
            frontDoor(request, bunServer, { config, admission, sampler: sampling.sampler, traced, untraced, logAccess, summarize: sampling.summarize })
          yield* Effect.addFinalizer(() => Effect.sync(() => (handler = null)))
        })
    })
  })

type WebHandler = (webRequest: Request, requestId: string, clientAddress: () => string) => Promise<Response>

interface FrontDoor {
  readonly config: Config.Config.Success<typeof FrontDoorConfig>
  readonly admission: ShutdownGate
  readonly sampler: TraceSampler
  readonly traced: WebHandler
  readonly untraced: WebHandler
  readonly logAccess: ((entry: AccessEntry) => void) | null
  readonly summarize: (entry: AccessEntry) => void
}

/** What the front door knows of an answered request: the sampler's summary, plus the path and the decision. */
export interface AccessEntry extends RequestSummary {
  readonly url: string
  readonly sampled: boolean
}

/** The access log line at info, or null when the level is above info (then it costs nothing). */
const accessLogger = (runtime: Runtime.Runtime<never>): ((entry: AccessEntry) => void) | null => {
  const level = FiberRefs.getOrDefault(runtime.fiberRefs, FiberRef.currentMinimumLogLevel)
  if (LogLevel.greaterThan(level, LogLevel.Info)) return null
  const run = Runtime.runFork(runtime)
  return (entry) => {
    run(Effect.logInfo("request").pipe(
      Effect.annotateLogs({
        method: entry.method,
        route: entry.route,
        path: publicPath(entry.url),
        status: entry.status,
        duration_ms: Math.round(entry.durationMs * 10) / 10
      }),
      Effect.provideService(RequestId, entry.requestId)
    ))
  }
}

const pathAndQueryOf = (url: string) => {
  const start = url.indexOf("/", url.indexOf("//") + 2)
  return start === -1 ? "/" : url.slice(start)
}

const frontDoor = async (request: Request, bunServer: BunServer<undefined>, door: FrontDoor): Promise<Response> => {
  const startedAt = Date.now()
  const started = performance.now()
  const url = pathAndQueryOf(request.url)
  const incoming = request.headers.get("x-request-id")
  const requestId = incoming !== null && incomingRequestId.test(incoming) ? incoming : newId("req")
  let sampled = false
  let response: Response
  if (!door.admission.enter()) {
    response = refusal(503, "service_unavailable", "The server is shutting down; retry the request.", requestId, true)
  } else {
    try {
      response = await admitted(request, bunServer, url, requestId, door, (decision) => (sampled = decision))
    } finally {
      door.admission.leave()
    }
  }
  response.headers.set("x-request-id", requestId)
  const entry: AccessEntry = {
    requestId,
    method: request.method,
    route: routeOf(request.method, url),
    url,
    status: response.status,
    startedAt,
    durationMs: performance.now() - started,
    sampled
  }
  recordRequestNow(entry.route, entry.method, entry.status, entry.durationMs / 1000)
  door.logAccess?.(entry)
  if (!sampled) door.summarize(entry)
  return response
}

const admitted = async (
  request: Request,
  bunServer: BunServer<undefined>,
  url: string,
  requestId: string,
  door: FrontDoor,
  recordSampling: (sampled: boolean) => void
): Promise<Response> => {
  const { headLimit, maxJsonBodyBytes } = door.config
  if (!requestHeadBytesAtMost(request, url, headLimit)) {
    return refusal(431, "headers_too_large", `The request line and headers are larger than ${headLimit} bytes.`, requestId, true)
  }
  const path = pathOnly(url)
  if (hasControlCharacterInPath(path)) {
    return refusal(404, "not_found", "No resource has a path with control characters or broken percent-encoding.", requestId, false)
  }
  let forwarded = request
  if (request.body !== null && !streamedBodyRoutes.some((route) => route.test(path))) {
    const tooLarge = () =>
      refusal(413, "payload_too_large", `The request body is larger than ${maxJsonBodyBytes} bytes.`, requestId, true)
    const declared = request.headers.get("content-length")
    if (declared !== null) {
      if (Number(declared) > maxJsonBodyBytes) return tooLarge()
    } else {
      const body = await readBounded(request.body, maxJsonBodyBytes)
      if (body === "too large") return tooLarge()
      if (body === "broken") return refusal(422, "validation_error", "request: the body broke off before its end", requestId, true)
      forwarded = new Request(request.url, { method: request.method, headers: request.headers, body, signal: request.signal })
    }
  }
  // Probes and scrapes are never traced: their spans would drown the ones that matter.
  const sampled = !untracedPaths.has(path) && door.sampler(request.headers.get("traceparent"))
  recordSampling(sampled)
  const clientAddress = () => bunServer.requestIP(request)?.address ?? "unknown"
  return (sampled ? door.traced : door.untraced)(forwarded, requestId, clientAddress)
}

/**
 * The server layer: HttpServer (serving whatever app HttpApiBuilder.serve hands it), the
 * platform services handlers use, and the admission gate the shutdown drain closes.
 */
export const layer = (options: ServeOptions) =>
  Layer.scoped(HttpServer.HttpServer, make(options)).pipe(
    Layer.provideMerge(Layer.mergeAll(ShutdownGate.Default, Sampling.Default)),
    Layer.merge(BunHttpServer.layerContext)
  )

/** For tests and the admin CLI: a server on a random loopback port. */
export const layerLoopback = (maxRequestBodySize = 300 * 1024 * 1024) =>
  layer({ port: 0, hostname: "127.0.0.1", maxRequestBodySize, idleTimeout: 60 })
