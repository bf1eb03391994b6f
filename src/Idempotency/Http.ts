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
 * The answer is encoded here with the endpoint's success schema, as the framework would
 * (IdempotentEndpoint, given by the endpoint's IdempotencyKeys middleware), so that the stored
 * bytes and the first response are the same bytes. The headers stored with it are those the
 * effect adds with `addAnswerHeaders` (Headers.ts); any other header it appends (a Retry-After
 * on an error) reaches this response only.
 */
import { Effect, Exit, Fiber, Layer, Option, Schema } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import type { HttpApiEndpoint } from "effect/http-api"
import { CurrentCaller } from "../Auth/Api.js"
import { bearerToken } from "../Auth/Bearer.js"
import { IdempotencyInProgress, RequestId, ServiceUnavailable, ValidationFailed } from "../Errors.js"
import { sha256Hex } from "../Ids.js"
import { recordOutcomeUnknown } from "../Observability/Metrics.js"
import { idempotencyKeyPattern, idempotencyKeyRule, IdempotencyKeys, IdempotentEndpoint } from "./Api.js"
import { AnswerHeaders, StoreAnswer } from "./Headers.js"
import { Idempotency, type KeyRequest, type Outcome, type StoredAnswer } from "./Idempotency.js"

/** Each idempotent endpoint's success codec, made once. */
const endpoints = new WeakMap<HttpApiEndpoint.Top, IdempotentEndpoint["Service"]>()
const idempotentEndpointOf = (endpoint: HttpApiEndpoint.Top) => {
  let found = endpoints.get(endpoint)
  if (found === undefined) {
    const success = Option.getOrUndefined(Option.fromIterable(endpoint.success))
    if (success === undefined) throw new Error(`IdempotencyKeys on ${endpoint.method} ${endpoint.path}, which has no success schema`)
    // A cast: the endpoint types its schemas as Schema.Top, whose encoding services are unknown.
    found = { success: success as Schema.Codec<unknown, unknown>, status: 200, contentType: "application/json" }
    endpoints.set(endpoint, found)
  }
  return found
}

/** The middleware of an idempotent endpoint: gives its handler the endpoint's success codec. */
export const IdempotencyKeysLive = Layer.succeed(
  IdempotencyKeys,
  IdempotencyKeys.of((httpEffect, { endpoint }) =>
    Effect.flatMap(Effect.sync(() => idempotentEndpointOf(endpoint)), (found) => Effect.provideService(httpEffect, IdempotentEndpoint, found)))
)

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

/** The 409 of a repeat whose first request's outcome is not known yet. */
const inProgress = new IdempotencyInProgress({
  message: "Idempotency-Key: the first request with this key is still committing, or its outcome is unknown (its connection " +
    "to the database was lost at COMMIT). Retry with the same key in a few seconds: once the outcome is known you get its " +
    "answer, or, if it did not commit, it runs once."
})

export const idempotent = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  parameters?: unknown
): Effect.Effect<
  A | HttpServerResponse.HttpServerResponse,
  E | ValidationFailed | ServiceUnavailable | IdempotencyInProgress,
  R | Idempotency | HttpServerRequest.HttpServerRequest | IdempotentEndpoint
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
    const endpoint = yield* IdempotentEndpoint
    const store = yield* Idempotency
    const keyRequest: KeyRequest = {
      scope: scope.value,
      key,
      method: request.method,
      path: request.url,
      fingerprint: sha256Hex(`${request.method}\n${request.url}\n${canonicalJson(parameters)}`),
      requestId: yield* RequestId
    }

    // A repeat waits for a first request still running.
    const claim = yield* store.claimOrWait(keyRequest)
    switch (claim._tag) {
      case "Mismatch":
        return yield* mismatch(claim.method, claim.path)
      case "Completed":
        return replay(claim.answer)
      case "InProgress":
      case "Held":
        return yield* inProgress
      case "Claimed":
        return yield* runAsOwner(effect, endpoint, keyRequest, claim.owner)
    }
  })

/** The 503 of a run whose transaction may or may not have committed, while the database cannot tell. */
const outcomeUnknown = new ServiceUnavailable({
  message: "The database connection was lost while this request was committing, and the database cannot tell yet whether " +
    "it did: its outcome is unknown. Retry with the same Idempotency-Key: until the outcome is known the retry is answered " +
    "409 idempotency_in_progress; then you get this request's answer if it completed, and it runs once if it did not."
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
 * tells what happened (Idempotency.ts, `outcomeOf`): committed, its answer is given; not, the key
 * is freed and the failure answered. When that cannot be told yet, the key stays held, the answer
 * is a 503 saying the outcome is unknown, and the server keeps asking in the background.
 */
const runAsOwner = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  endpoint: IdempotentEndpoint["Service"],
  keyRequest: KeyRequest,
  owner: string
) =>
  Effect.gen(function*() {
    const store = yield* Idempotency
    const release = store.release(keyRequest.scope, keyRequest.key, owner)
    const encode = Schema.encodeUnknownEffect(endpoint.success)
    const answerOf = (value: unknown, headers: Record<string, string>) =>
      Effect.map(Effect.orDie(encode(value)), (encoded): StoredAnswer => ({
        status: endpoint.status,
        contentType: endpoint.contentType,
        headers,
        body: JSON.stringify(encoded),
        requestId: keyRequest.requestId
      }))
    const respond = (answer: StoredAnswer) => HttpServerResponse.text(answer.body, { status: answer.status, contentType: answer.contentType })
    let storedInTransaction: StoredAnswer | null = null

    /** What a run that had stored its answer in its transaction and then failed answers. */
    const afterUncertainFailure = (exit: Exit.Exit<A, E>) =>
      Effect.flatMap(store.outcomeOf(keyRequest, owner), (outcome: Outcome): Effect.Effect<Exit.Exit<A | HttpServerResponse.HttpServerResponse, E | ServiceUnavailable>> => {
        if (outcome._tag === "Committed") return Effect.succeed(Exit.succeed(respond(outcome.answer)))
        if (outcome._tag === "NotCommitted") return Effect.succeed(exit)
        recordOutcomeUnknown()
        return Effect.logWarning("a request's outcome is unknown: its idempotency key stays held").pipe(
          Effect.annotateLogs({ method: keyRequest.method, path: keyRequest.path }),
          Effect.andThen(store.resolveLater(keyRequest, owner)),
          Effect.as(Exit.fail(outcomeUnknown))
        )
      })

    const attempt = Effect.gen(function*() {
      const heartbeat = yield* Effect.forkChild(store.keepAlive(keyRequest.scope, keyRequest.key, owner))
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
