/**
 * `idempotent(effect, parameters)`: what a handler wraps its work in to honour Idempotency-Key.
 *
 *   .handle("grantCredits", ({ path, payload }) => idempotent(grant(path.id, payload), payload))
 *
 * It runs inside the handler, so after authentication and after the payload was decoded: a
 * request that fails either never reaches it and stores nothing. Without the header the effect
 * just runs. With it:
 * - the key must be 1 to 255 printable ASCII characters (else 422 naming Idempotency-Key);
 * - the key is scoped to the caller's API key (another key of the same account has its own
 *   keys and never sees this key's answers), or to the admin token on /admin;
 * - the fingerprint is method, path (with query) and the decoded `parameters` in canonical JSON
 *   (key order and whitespace do not matter; a route without a body passes none: its body is
 *   ignored). Another fingerprint on a known key → 422 naming Idempotency-Key;
 * - the first request runs the effect; a 2xx answer is stored (status, JSON body, and the
 *   headers the handler itself added, i.e. X-Credits-*) and returned; an error is not stored:
 *   it changed nothing, so the key is freed and a retry runs again (this covers 5xx as well, but
 *   for a transaction lost at COMMIT whose answer was stored in it: see runAsOwner);
 * - the run goes on when its client hangs up (a client timing out is the usual reason to
 *   retry), so the retry finds the finished answer instead of running the request twice;
 * - a repeat gets the stored answer with `Idempotent-Replayed: true` and
 *   `Original-Request-Id`; one arriving while the first runs waits for it.
 *
 * The answer is encoded here with the route's success schema (exactly as the framework would)
 * so that the stored bytes and the first response are the same bytes. The headers stored with it
 * are those the effect adds with `addAnswerHeaders` (Headers.ts); any other header it appends
 * (a Retry-After on an error) reaches this response only.
 */
import { Duration, Effect, Exit, Fiber, Option, Schema, SchemaAST } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { routeKey, routeTable } from "../ApiRoutes.js"
import { CurrentCaller } from "../Auth/Api.js"
import { bearerToken } from "../Auth/Bearer.js"
import { RequestId, ServiceUnavailable, ValidationFailed } from "../Errors.js"
import { sha256Hex } from "../Ids.js"
import { recordOutcomeUnknown } from "../Observability/Metrics.js"
import { idempotencyKeyPattern, idempotencyKeyRule } from "./Api.js"
import { AnswerHeaders, StoreAnswer } from "./Headers.js"
import { Idempotency, type KeyRequest, type StoredAnswer } from "./Idempotency.js"

/**
 * Every endpoint's success schema (its JSON codec), keyed by the route the router matched; built
 * on first use, once every module of the API is loaded. Hookline's success schemas need no
 * services to encode.
 */
let successSchemas: ReadonlyMap<string, Schema.Codec<unknown, unknown>> | undefined
const successSchemaOf = (method: string, path: string) => {
  successSchemas ??= routeTable((endpoint) =>
    // A cast: the endpoint types its schemas as Schema.Top, whose encoding services are unknown.
    Option.map(Option.fromIterable(endpoint.success), (schema) => schema as Schema.Codec<unknown, unknown>)
  )
  return successSchemas.get(routeKey(method, path))
}

/**
 * The status and media type the framework answers with for a success schema: HttpApiSchema's
 * status and encoding annotations (read by key: HttpApiSchema has no public getter), else 200 JSON.
 */
const statusAnnotation = SchemaAST.resolveAt<unknown>("httpApiStatus")
const encodingAnnotation = SchemaAST.resolveAt<{ readonly contentType?: unknown }>("~httpApiEncoding")
const responseOf = (success: Schema.Codec<unknown, unknown>) => {
  const status = statusAnnotation(success.ast) ?? Schema.resolveAnnotationsKey(success)?.["httpApiStatus"]
  const contentType = encodingAnnotation(success.ast)?.contentType
  return {
    status: typeof status === "number" ? status : 200,
    contentType: typeof contentType === "string" ? contentType : "application/json"
  }
}

/** JSON with object keys sorted at every level, so equal parameters give equal text. */
const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_key, inner: unknown) =>
    inner !== null && typeof inner === "object" && !Array.isArray(inner) && !(inner instanceof Date)
      ? Object.fromEntries(Object.entries(inner).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : inner) ?? ""

const replay = (answer: StoredAnswer) =>
  HttpServerResponse.text(answer.body, {
    status: answer.status,
    contentType: answer.contentType,
    headers: {
      ...answer.headers,
      "idempotent-replayed": "true",
      ...(answer.requestId === null ? {} : { "original-request-id": answer.requestId })
    }
  })

const mismatch = (method: string, path: string) =>
  new ValidationFailed({
    message: `Idempotency-Key: this key was already used for another request (${method} ${path} with other parameters); ` +
      "use a new key for a new request."
  })

/** The API key for /v1 routes; the admin token (as a digest) for /admin routes. */
const scopeOf = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.map(Effect.serviceOption(CurrentCaller), (caller) => {
    if (Option.isSome(caller)) return Option.some(`key:${caller.value.keyId}`)
    const token = bearerToken(request.headers["authorization"])
    return token !== null && request.url.startsWith("/admin/")
      ? Option.some(`admin:${sha256Hex(token).slice(0, 32)}`)
      : Option.none()
  })

export const idempotent = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  parameters?: unknown
): Effect.Effect<
  A | HttpServerResponse.HttpServerResponse,
  E | ValidationFailed | ServiceUnavailable,
  R | Idempotency | HttpServerRequest.HttpServerRequest | HttpRouter.RouteContext
> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const key = request.headers["idempotency-key"]
    if (key === undefined) return yield* effect
    if (!idempotencyKeyPattern.test(key)) {
      return yield* new ValidationFailed({ message: `Idempotency-Key: ${idempotencyKeyRule}.` })
    }
    const scope = yield* scopeOf(request)
    if (Option.isNone(scope)) return yield* Effect.die(new Error(`idempotent() used on an unauthenticated route ${request.url}`))
    const route = yield* HttpRouter.RouteContext
    const success = successSchemaOf(route.route.method, route.route.path)
    if (success === undefined) return yield* Effect.die(new Error(`No endpoint for ${route.route.method} ${route.route.path}`))
    const store = yield* Idempotency
    const keyRequest: KeyRequest = {
      scope: scope.value,
      key,
      method: request.method,
      path: request.url,
      fingerprint: sha256Hex(`${request.method}\n${request.url}\n${canonicalJson(parameters)}`),
      requestId: yield* RequestId
    }

    // A repeat waits for the first request, looking again after 1, 2, 4, 8, then every 10 poll intervals.
    for (let waits = 0; ; waits++) {
      const claim = yield* store.claim(keyRequest)
      switch (claim._tag) {
        case "Mismatch":
          return yield* mismatch(claim.method, claim.path)
        case "Completed":
          return replay(claim.answer)
        case "InProgress":
          yield* Effect.sleep(Duration.times(store.config.pollInterval, Math.min(2 ** waits, 10)))
          continue
        case "Claimed":
          return yield* runAsOwner(effect, success, keyRequest, claim.owner)
      }
    }
  })

/** The 503 of a run whose transaction may or may not have committed, while the database cannot tell. */
const outcomeUnknown = new ServiceUnavailable({
  message: "The database connection was lost while this request was committing, and the database cannot be reached to " +
    "tell whether it did: its outcome is unknown. Retry with the same Idempotency-Key: you get its answer if it completed, " +
    "and it runs once if it did not."
})

/**
 * Runs the effect under the claim and stores its answer (or frees the key when it failed).
 * It runs in a fiber of its own: a client that hangs up mid-way does not stop it, so whatever it
 * committed is answered to the client's retry. A run stopped by a server shutdown keeps its claim
 * (what it committed is unknown); the claim is taken over after the lock timeout, as after a crash.
 * The fiber shares the request's pre-response handlers, so the headers the effect adds reach
 * this response directly.
 *
 * An effect that stores its answer in its own transaction (`answerInTransaction`, Headers.ts)
 * commits the answer with its changes. When it then fails (a connection lost at COMMIT), the key
 * tells what happened: completed, it committed and its answer is given; still held, it did not,
 * and the key is freed. When the database cannot be asked, the key stays held (a retry waits for
 * the lock timeout, then runs) and the answer is a 503 saying the outcome is unknown.
 */
const runAsOwner = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  success: Schema.Codec<unknown, unknown>,
  keyRequest: KeyRequest,
  owner: string
) =>
  Effect.gen(function*() {
    const store = yield* Idempotency
    const release = store.release(keyRequest.scope, keyRequest.key, owner)
    const encode = Schema.encodeUnknownEffect(success)
    const answerOf = (value: unknown, headers: Record<string, string>) =>
      Effect.map(Effect.orDie(encode(value)), (encoded): StoredAnswer => ({
        ...responseOf(success),
        headers,
        body: JSON.stringify(encoded),
        requestId: keyRequest.requestId
      }))
    const respond = (answer: StoredAnswer) => HttpServerResponse.text(answer.body, { status: answer.status, contentType: answer.contentType })
    let storedInTransaction: StoredAnswer | null = null

    /** What a run that had stored its answer in its transaction and then failed answers. */
    const afterUncertainFailure = (exit: Exit.Exit<A, E>) =>
      Effect.flatMap(Effect.exit(store.outcomeOf(keyRequest, owner)), (outcome): Effect.Effect<Exit.Exit<A | HttpServerResponse.HttpServerResponse, E | ServiceUnavailable>> => {
        if (Exit.isSuccess(outcome)) {
          return Effect.succeed(Option.match(outcome.value, { onNone: () => exit, onSome: (answer) => Exit.succeed(respond(answer)) }))
        }
        recordOutcomeUnknown()
        return Effect.logWarning("a request's outcome is unknown: its idempotency key stays held").pipe(
          Effect.annotateLogs({ method: keyRequest.method, path: keyRequest.path }),
          Effect.as(Exit.fail(outcomeUnknown))
        )
      })

    const attempt = Effect.gen(function*() {
      const heartbeat = yield* store.heartbeat(keyRequest.scope, keyRequest.key, owner).pipe(
        Effect.delay(Duration.divideUnsafe(store.config.lockTimeout, 3)),
        Effect.forever,
        Effect.forkChild
      )
      const headers: Record<string, string> = {}
      const storeAnswer = (value: unknown) =>
        Effect.gen(function*() {
          const answer = yield* answerOf(value, headers)
          // The claim was taken over: die, so the caller's transaction rolls back and nothing of this run commits.
          if (!(yield* store.complete(keyRequest.scope, keyRequest.key, owner, answer))) {
            return yield* Effect.die(new Error("an idempotency key was taken over before its answer was stored"))
          }
          storedInTransaction = answer
        })
      const exit = yield* Effect.exit(effect).pipe(
        Effect.provideService(AnswerHeaders, headers),
        Effect.provideService(StoreAnswer, storeAnswer),
        Effect.ensuring(Fiber.interrupt(heartbeat))
      )
      if (Exit.isFailure(exit)) {
        if (Exit.hasInterrupts(exit)) return exit
        if (storedInTransaction !== null) return yield* afterUncertainFailure(exit)
        yield* release
        return exit
      }
      if (storedInTransaction !== null) return Exit.succeed(respond(storedInTransaction))
      const answer = yield* answerOf(exit.value, headers)
      const stored = yield* store.complete(keyRequest.scope, keyRequest.key, owner, answer)
      if (!stored) yield* Effect.logWarning("an idempotency key was taken over before its answer was stored")
      return Exit.succeed(respond(answer))
    }).pipe(
      // A defect while encoding or storing: free the key, nothing was stored.
      Effect.onExit((exit) => (Exit.isFailure(exit) && !Exit.hasInterrupts(exit) ? Effect.ignore(release) : Effect.void))
    )

    const outcome = yield* Fiber.join(yield* Effect.forkDetach(attempt))
    return yield* outcome
  })
