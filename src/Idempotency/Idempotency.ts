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
 * Answer bodies can hold secrets shown once (an API key, a webhook secret), so they are sealed
 * at rest (Crypto.ts) under the server's WEBHOOK_SECRET_KEY.
 */
import { Config, Context, Duration, Effect, Layer, Option, Redacted, Result, Schedule } from "effect"
import { Secrets } from "../Config.js"
import { makeSealer } from "../Crypto.js"
import { randomToken } from "../Ids.js"
import { logBackgroundFailure } from "../Sql.js"
import { IdempotencyRepo } from "./Repo.js"

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
  | { readonly _tag: "Mismatch"; readonly method: string; readonly path: string }

const make = Effect.gen(function*() {
  const repo = yield* IdempotencyRepo
  const config = yield* IdempotencyConfig
  const secrets = yield* Secrets
  // Bound to the key's scope and name, so a sealed body copied to another row does not open.
  const sealer = makeSealer(Redacted.value(secrets.webhookSecretKey), "idempotent-answer-v1")
  const ttl = Duration.toSeconds(config.keyTtl)
  const lock = Duration.toSeconds(config.lockTimeout)
  const bindingOf = (scope: string, key: string) => `${scope}\n${key}`

  /** One attempt to claim `request.key`; otherwise what the row holds now. */
  const claim = (request: KeyRequest) =>
    Effect.gen(function*() {
      const owner = randomToken(12)
      const claimed = yield* repo.claimKey({ ...request, owner, ttlSeconds: ttl, lockSeconds: lock })
      if (Option.isSome(claimed)) return { _tag: "Claimed", owner } satisfies Claim
      const found = yield* repo.findLiveKey(request.scope, request.key)
      // Released or expired between the two statements: look again at once.
      if (Option.isNone(found)) return { _tag: "InProgress" } satisfies Claim
      const row = found.value
      if (row.fingerprint !== request.fingerprint) {
        return { _tag: "Mismatch", method: row.method, path: row.path } satisfies Claim
      }
      if (row.status === "in_progress" || row.response_status === null || row.response_body === null) {
        return { _tag: "InProgress" } satisfies Claim
      }
      const opened = sealer.open(row.response_body, bindingOf(request.scope, request.key))
      if (Result.isFailure(opened)) {
        return yield* Effect.die(new Error("A stored idempotent answer does not open with this server's WEBHOOK_SECRET_KEY"))
      }
      const { "content-type": contentType, ...headers } = row.response_headers ?? {}
      return {
        _tag: "Completed",
        answer: {
          status: row.response_status,
          contentType: contentType ?? "application/json",
          headers,
          body: opened.success,
          requestId: row.request_id
        }
      } satisfies Claim
    })

  /** Keeps `owner`'s claim alive. */
  const heartbeat = (scope: string, key: string, owner: string) => repo.touchClaim(scope, key, owner)

  /** Stores the answer; false when the claim was lost (taken over after a stall). */
  const complete = (scope: string, key: string, owner: string, answer: StoredAnswer) =>
    repo.completeKey({
      scope,
      key,
      owner,
      status: answer.status,
      headers: { ...answer.headers, "content-type": answer.contentType },
      sealedBody: sealer.seal(answer.body, bindingOf(scope, key))
    }).pipe(Effect.map(Option.isSome))

  /** Frees the key after a failed attempt, so a retry runs the request again; false when it was not held by `owner` any more. */
  const release = (scope: string, key: string, owner: string) => repo.releaseKey(scope, key, owner)

  /**
   * After a run that stored its answer in its own transaction failed on the way (a connection lost
   * at COMMIT: did it commit?): the answer when it committed (the key is completed), else None with
   * the key freed, so a retry runs it. The release waits for a transaction still completing the key.
   */
  const outcomeOf = (request: KeyRequest, owner: string) =>
    Effect.gen(function*() {
      if (yield* release(request.scope, request.key, owner)) return Option.none<StoredAnswer>()
      const found = yield* claim(request)
      if (found._tag === "Claimed") yield* release(request.scope, request.key, found.owner)
      return found._tag === "Completed" ? Option.some(found.answer) : Option.none<StoredAnswer>()
    })

  /** Deletes expired keys in batches; returns how many. */
  const sweepExpired = repo.sweepExpired(lock)

  return { config, claim, heartbeat, complete, release, outcomeOf, sweepExpired } as const
})

export class Idempotency extends Context.Service<Idempotency, Effect.Success<typeof make>>()("hookline/Idempotency") {
  /** Takes its IdempotencyRepo from the caller (the in-memory one in a test). */
  static readonly layerWithoutDependencies = Layer.effect(Idempotency, make).pipe(Layer.provide(Secrets.layer))
  /** With its repository; needs SqlClient from outside. */
  static readonly layer = Idempotency.layerWithoutDependencies.pipe(Layer.provide(IdempotencyRepo.layer))
}

/** The background fiber deleting expired keys. */
export const IdempotencySweeperLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const store = yield* Idempotency
    const sweep = store.sweepExpired.pipe(
      Effect.tap((deleted) => deleted > 0 ? Effect.logDebug("swept idempotency keys").pipe(Effect.annotateLogs({ deleted })) : Effect.void),
      Effect.catchCause(logBackgroundFailure("idempotency key sweep failed")),
      Effect.withSpan("Idempotency.sweep")
    )
    yield* sweep.pipe(Effect.repeat(Schedule.spaced(store.config.sweepInterval)), Effect.forkScoped)
  })
)
