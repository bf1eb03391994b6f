/**
 * The store behind Idempotency-Key: one row per (scope, key) in Postgres, so a replay works
 * from any server process and after a restart.
 *
 * A request *claims* its key by inserting the row 'in_progress' with itself as owner (the
 * primary key makes exactly one concurrent claimer win), keeps the claim alive with a heartbeat
 * while it runs, then either *completes* it with the answer to replay or *releases* it (deletes
 * it) when it failed. Everyone else finds the row: another fingerprint → mismatch, completed →
 * replay, in progress → wait and look again. A claim whose owner stopped heart-beating (its
 * process died) is taken over after the lock timeout. Expired keys count as absent at once and
 * are deleted by the sweeper.
 *
 * A request whose answer commits with its effect (Http.ts) and whose connection is lost at COMMIT
 * has an outcome the key itself tells, once the transaction holding the key's row has ended:
 * completed, it committed; still 'in_progress', it did not, and the key is freed. Until then
 * (the database unreachable, or the transaction still open on a connection cut off from this
 * server) the key stays held: a repeat is refused (`Held`, 409), never run, and this process
 * keeps asking in the background, so the key is freed or answered as soon as it can be.
 *
 * Answer bodies can hold secrets shown once (an API key, a webhook secret), so they are sealed
 * at rest (Crypto.ts) under the server's WEBHOOK_SECRET_KEY.
 */
import { Config, Context, Duration, Effect, Layer, Option, Redacted, Result, Schedule, type Scope } from "effect"
import { Secrets } from "../Config.js"
import { makeSealer } from "../Crypto.js"
import { randomToken } from "../Ids.js"
import { logBackgroundFailure } from "../Sql.js"
import { type ClaimRequest, IdempotencyRepo, isKeyHeld, type KeyRow } from "./Repo.js"

export const IdempotencyConfig = Config.all({
  /** How long a key's answer is replayed. */
  keyTtl: Config.Duration("IDEMPOTENCY_KEY_TTL").pipe(Config.withDefault(Duration.hours(24))),
  /** A claim not heart-beaten for this long belongs to a dead process and may be taken over. */
  lockTimeout: Config.Duration("IDEMPOTENCY_LOCK_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30))),
  /** How often a repeat waiting for the first request looks again. */
  pollInterval: Config.Duration("IDEMPOTENCY_POLL_INTERVAL").pipe(Config.withDefault(Duration.millis(25))),
  sweepInterval: Config.Duration("IDEMPOTENCY_SWEEP_INTERVAL").pipe(Config.withDefault(Duration.minutes(10)))
})

/** What a repeat is answered with. */
export interface StoredAnswer {
  readonly status: number
  readonly contentType: string
  /** The endpoint's own response headers (X-Credits-*), lower-case names. */
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  /** The X-Request-Id of the request that produced the answer. */
  readonly requestId: string | null
}

export interface KeyRequest {
  readonly scope: string
  readonly key: string
  readonly fingerprint: string
  readonly method: string
  readonly path: string
  readonly requestId: string
}

export type Claim =
  | { readonly _tag: "Claimed"; readonly owner: string }
  | { readonly _tag: "Completed"; readonly answer: StoredAnswer }
  | { readonly _tag: "InProgress" }
  /** A transaction holds the key's row past the lock wait: its first request's outcome is not known yet. */
  | { readonly _tag: "Held" }
  | { readonly _tag: "Mismatch"; readonly method: string; readonly path: string }

/** What became of a run that stored its answer in its transaction and then lost its connection. */
export type Outcome =
  | { readonly _tag: "Committed"; readonly answer: StoredAnswer }
  | { readonly _tag: "NotCommitted" }
  | { readonly _tag: "Unknown" }

const unknown: Outcome = { _tag: "Unknown" }
const notCommitted: Outcome = { _tag: "NotCommitted" }

/** A statement on a key whose row a transaction holds past the lock wait: `held` instead of its result. */
const orHeld = <A, B>(effect: Effect.Effect<A>, held: B): Effect.Effect<A | B> =>
  Effect.catchDefect(effect, (defect) => (isKeyHeld(defect) ? Effect.succeed(held) : Effect.die(defect)))

type Sealer = ReturnType<typeof makeSealer>

/** Bound to the key's scope and name, so a sealed body copied to another row does not open. */
const bindingOf = (scope: string, key: string) => `${scope}\n${key}`

/** The completed answer a row holds, opened with `sealer`; None while it is in progress. */
const answerIn = (sealer: Sealer, row: KeyRow, request: KeyRequest) =>
  Effect.gen(function*() {
    if (row.status === "in_progress" || row.response_status === null || row.response_body === null) {
      return Option.none<StoredAnswer>()
    }
    const opened = sealer.open(row.response_body, bindingOf(request.scope, request.key))
    if (Result.isFailure(opened)) {
      return yield* Effect.die(new Error("A stored idempotent answer does not open with this server's WEBHOOK_SECRET_KEY"))
    }
    const { "content-type": contentType, ...headers } = row.response_headers ?? {}
    return Option.some<StoredAnswer>({
      status: row.response_status,
      contentType: contentType ?? "application/json",
      headers,
      body: opened.success,
      requestId: row.request_id
    })
  })

/**
 * Asks `outcomeOf` again until the outcome is known, backing off from the poll interval to the
 * lock timeout between attempts, for at most the key's lifetime; then logs it. In the service's
 * background (`scope`): a repeat meanwhile is refused or waits, never runs.
 */
const resolveInBackground = (
  outcomeOf: Effect.Effect<Outcome>,
  request: KeyRequest,
  config: Config.Success<typeof IdempotencyConfig>,
  scope: Scope.Scope
) =>
  outcomeOf.pipe(
    Effect.repeat({
      schedule: Schedule.max([
        Schedule.min([Schedule.exponential(config.pollInterval), Schedule.spaced(config.lockTimeout)]),
        Schedule.during(config.keyTtl)
      ]),
      while: (outcome) => outcome._tag === "Unknown"
    }),
    Effect.flatMap((outcome) =>
      Effect.logInfo("a request's unknown outcome is now known").pipe(
        Effect.annotateLogs({ method: request.method, path: request.path, request_id: request.requestId, outcome: outcome._tag })
      )),
    Effect.forkIn(scope),
    Effect.asVoid
  )

/** What the key store offers: a key's claim, kept alive while its request runs, then its answer or its release. */
export interface IdempotencyService {
  /** One attempt to claim `request.key`; otherwise what the key holds now. */
  readonly claim: (request: KeyRequest) => Effect.Effect<Claim>
  /**
   * Claims `request.key`, waiting while its first request runs (looking again after 1, 2, 4, 8,
   * then every 10 IDEMPOTENCY_POLL_INTERVALs): never answers InProgress.
   */
  readonly claimOrWait: (request: KeyRequest) => Effect.Effect<Claim>
  /** Keeps `owner`'s claim alive once; a row its own transaction holds (completing it) needs none. */
  readonly heartbeat: (scope: string, key: string, owner: string) => Effect.Effect<void>
  /** Heart-beats `owner`'s claim every third of IDEMPOTENCY_LOCK_TIMEOUT, until interrupted. */
  readonly keepAlive: (scope: string, key: string, owner: string) => Effect.Effect<never>
  /** Stores the answer; false when the claim was lost (taken over after a stall). */
  readonly complete: (scope: string, key: string, owner: string, answer: StoredAnswer) => Effect.Effect<boolean>
  /** Frees the key after a failed attempt, so a retry runs the request again; false when it was not held by `owner` any more. */
  readonly release: (scope: string, key: string, owner: string) => Effect.Effect<boolean>
  /** Whether a run that stored its answer in its own transaction, then lost its connection, committed (Unknown while that cannot be told). */
  readonly outcomeOf: (request: KeyRequest, owner: string) => Effect.Effect<Outcome>
  /** Keeps asking for an unknown outcome in the background until it is known. */
  readonly resolveLater: (request: KeyRequest, owner: string) => Effect.Effect<void>
  /** Deletes expired keys in batches; how many. */
  readonly sweepExpired: Effect.Effect<number>
}

const make = Effect.gen(function*() {
  const repo = yield* IdempotencyRepo
  const config = yield* IdempotencyConfig
  // Where background resolutions run: stopped with the service.
  const scope = yield* Effect.scope
  const secrets = yield* Secrets
  const sealer = makeSealer(Redacted.value(secrets.webhookSecretKey), "idempotent-answer-v1")
  const ttl = Duration.toSeconds(config.keyTtl)
  const lock = Duration.toSeconds(config.lockTimeout)

  const claim = (request: KeyRequest) =>
    Effect.gen(function*() {
      const owner = randomToken(12)
      const claimRequest: ClaimRequest = { ...request, owner, ttlSeconds: ttl, lockSeconds: lock }
      const claimed = yield* orHeld(repo.claimKey(claimRequest), "held" as const)
      if (claimed === "held") return { _tag: "Held" } satisfies Claim
      if (Option.isSome(claimed)) return { _tag: "Claimed", owner } satisfies Claim
      const found = yield* repo.findLiveKey(request.scope, request.key)
      // Released or expired between the two statements: look again at once.
      if (Option.isNone(found)) return { _tag: "InProgress" } satisfies Claim
      const row = found.value
      if (row.fingerprint !== request.fingerprint) {
        return { _tag: "Mismatch", method: row.method, path: row.path } satisfies Claim
      }
      const answer = yield* answerIn(sealer, row, request)
      return Option.isSome(answer) ? { _tag: "Completed", answer: answer.value } satisfies Claim : { _tag: "InProgress" } satisfies Claim
    })

  const claimOrWait = (request: KeyRequest) =>
    claim(request).pipe(Effect.repeat({
      schedule: Schedule.min([Schedule.exponential(config.pollInterval), Schedule.spaced(Duration.times(config.pollInterval, 10))]),
      while: (found: Claim) => found._tag === "InProgress"
    }))

  const heartbeat = (scope: string, key: string, owner: string) => orHeld(repo.touchClaim(scope, key, owner), undefined)

  // Three beats a lock timeout: one late beat does not lose the claim.
  const keepAlive = (scope: string, key: string, owner: string) =>
    heartbeat(scope, key, owner).pipe(Effect.delay(Duration.divideUnsafe(config.lockTimeout, 3)), Effect.forever)

  const complete = (scope: string, key: string, owner: string, answer: StoredAnswer) =>
    repo.completeKey({
      scope,
      key,
      owner,
      status: answer.status,
      headers: { ...answer.headers, "content-type": answer.contentType },
      sealedBody: sealer.seal(answer.body, bindingOf(scope, key))
    }).pipe(Effect.map(Option.isSome))

  const release = (scope: string, key: string, owner: string) => repo.releaseKey(scope, key, owner)

  /**
   * After a run that stored its answer in its own transaction lost its connection (did it
   * commit?): the release waits for a transaction still holding the key (at most the lock wait).
   * Freed: it did not commit, and a retry runs it. Not `owner`'s claim any more: completed with
   * the answer it committed, or taken over (its answer could not have committed). Unknown while
   * the database cannot be asked or the transaction still holds the key.
   */
  const outcomeOf = (request: KeyRequest, owner: string): Effect.Effect<Outcome> =>
    Effect.gen(function*() {
      const released = yield* orHeld(release(request.scope, request.key, owner), "held" as const)
      if (released === "held") return unknown
      if (released) return notCommitted
      const found = yield* repo.findLiveKey(request.scope, request.key)
      const answer = Option.isSome(found) ? yield* answerIn(sealer, found.value, request) : Option.none<StoredAnswer>()
      return Option.match(answer, { onNone: () => notCommitted, onSome: (stored): Outcome => ({ _tag: "Committed", answer: stored }) })
    }).pipe(Effect.catchDefect(() => Effect.succeed(unknown)))

  const resolveLater = (request: KeyRequest, owner: string) => resolveInBackground(outcomeOf(request, owner), request, config, scope)

  const sweepExpired = repo.sweepExpired(lock)

  return Idempotency.of({ claim, claimOrWait, heartbeat, keepAlive, complete, release, outcomeOf, resolveLater, sweepExpired })
})

export class Idempotency extends Context.Service<Idempotency, IdempotencyService>()("hookline/Idempotency") {
  /** Takes its IdempotencyRepo from the caller (the in-memory one in a test). */
  static readonly layerWithoutDependencies = Layer.effect(Idempotency, make).pipe(Layer.provide(Secrets.layer))
  /** With its repository; needs SqlClient from outside. */
  static readonly layer = Idempotency.layerWithoutDependencies.pipe(Layer.provide(IdempotencyRepo.layer))
}

/** The background fiber deleting expired keys. */
export const IdempotencySweeperLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const store = yield* Idempotency
    const { sweepInterval } = yield* IdempotencyConfig
    const sweep = store.sweepExpired.pipe(
      Effect.tap((deleted) => deleted > 0 ? Effect.logDebug("swept idempotency keys").pipe(Effect.annotateLogs({ deleted })) : Effect.void),
      Effect.catchCause(logBackgroundFailure("idempotency key sweep failed")),
      Effect.withSpan("Idempotency.sweep")
    )
    yield* sweep.pipe(Effect.repeat(Schedule.spaced(sweepInterval)), Effect.forkScoped)
  })
)
