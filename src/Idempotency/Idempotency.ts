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
import { SqlClient } from "@effect/sql"
import { Config, Duration, Effect, Either, Layer, Redacted, Schedule, Schema } from "effect"
import { Secrets } from "../Config.js"
import { makeSealer, type Sealer } from "../Crypto.js"
import { randomToken } from "../Ids.js"
import { orDieOnDb } from "../Sql.js"

export const IdempotencyConfig = Config.all({
  /** How long a key's answer is replayed. */
  keyTtl: Config.duration("IDEMPOTENCY_KEY_TTL").pipe(Config.withDefault(Duration.hours(24))),
  /** A claim not heart-beaten for this long belongs to a dead process and may be taken over. */
  lockTimeout: Config.duration("IDEMPOTENCY_LOCK_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30))),
  /** How often a repeat waiting for the first request looks again. */
  pollInterval: Config.duration("IDEMPOTENCY_POLL_INTERVAL").pipe(Config.withDefault(Duration.millis(25))),
  sweepInterval: Config.duration("IDEMPOTENCY_SWEEP_INTERVAL").pipe(Config.withDefault(Duration.minutes(10)))
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

const KeyRow = Schema.Struct({
  fingerprint: Schema.String,
  method: Schema.String,
  path: Schema.String,
  status: Schema.Literal("in_progress", "completed"),
  request_id: Schema.NullOr(Schema.String),
  response_status: Schema.NullOr(Schema.Number),
  response_headers: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.String })),
  response_body: Schema.NullOr(Schema.String)
})

/** A sealed answer opens only for its own key. */
const bindingOf = (scope: string, key: string) => `${scope}\n${key}`

/**
 * Claims `request.key` for `owner`: a new key, an expired one, or one whose holder stalled past
 * `lockSeconds` on the same request. The claim's commit does not wait for the disk
 * (synchronous_commit off, for this statement only): whatever the request then commits flushes
 * the log past the claim, and a claim lost with a database crash before that guarded nothing.
 * Storing the answer waits as usual.
 */
const claimStatement = (sql: SqlClient.SqlClient, request: KeyRequest, owner: string, ttlSeconds: number, lockSeconds: number) =>
  sql<{ owner: string }>`
    INSERT INTO idempotency_keys AS k
           (scope, key, fingerprint, method, path, status, owner, locked_at, request_id, created_at, expires_at)
    SELECT ${request.scope}, ${request.key}, ${request.fingerprint}, ${request.method}, ${request.path},
           'in_progress', ${owner}, now(), ${request.requestId}, now(), now() + make_interval(secs => ${ttlSeconds})
      FROM (SELECT set_config('synchronous_commit', 'off', true)) AS this_statement_only
    ON CONFLICT (scope, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
           status = 'in_progress', owner = EXCLUDED.owner, locked_at = now(), request_id = EXCLUDED.request_id,
           response_status = NULL, response_headers = NULL, response_body = NULL,
           created_at = now(), completed_at = NULL, expires_at = EXCLUDED.expires_at
     WHERE k.expires_at <= now()
        OR (k.status = 'in_progress' AND k.locked_at <= now() - make_interval(secs => ${lockSeconds})
            AND k.fingerprint = EXCLUDED.fingerprint)
    RETURNING k.owner`

/** What an existing row tells a request that could not claim its key (undefined: the row is gone). */
const storedClaim = (row: typeof KeyRow.Type | undefined, request: KeyRequest, sealer: Sealer): Effect.Effect<Claim> => {
  // Released or expired between the two statements: look again at once.
  if (row === undefined) return Effect.succeed({ _tag: "InProgress" } satisfies Claim)
  if (row.fingerprint !== request.fingerprint) {
    return Effect.succeed({ _tag: "Mismatch", method: row.method, path: row.path } satisfies Claim)
  }
  if (row.status === "in_progress" || row.response_status === null || row.response_body === null) {
    return Effect.succeed({ _tag: "InProgress" } satisfies Claim)
  }
  const opened = sealer.open(row.response_body, bindingOf(request.scope, request.key))
  if (Either.isLeft(opened)) {
    return Effect.dieMessage("A stored idempotent answer does not open with this server's WEBHOOK_SECRET_KEY")
  }
  const { "content-type": contentType, ...headers } = row.response_headers ?? {}
  return Effect.succeed({
    _tag: "Completed",
    answer: {
      status: row.response_status,
      contentType: contentType ?? "application/json",
      headers,
      body: opened.right,
      requestId: row.request_id
    }
  } satisfies Claim)
}

export class Idempotency extends Effect.Service<Idempotency>()("hookline/Idempotency", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* IdempotencyConfig
    const secrets = yield* Secrets
    // Bound to the key's scope and name, so a sealed body copied to another row does not open.
    const sealer = makeSealer(Redacted.value(secrets.webhookSecretKey), "idempotent-answer-v1")
    const ttl = Duration.toSeconds(config.keyTtl)
    const lock = Duration.toSeconds(config.lockTimeout)

    /** One attempt to claim `request.key`; otherwise what the row holds now. */
    const claim = (request: KeyRequest) =>
      Effect.gen(function*() {
        const owner = randomToken(12)
        const claimed = yield* claimStatement(sql, request, owner, ttl, lock)
        if (claimed.length > 0) return { _tag: "Claimed", owner } satisfies Claim
        const rows = yield* sql`
          SELECT fingerprint, method, path, status, request_id, response_status, response_headers, response_body
            FROM idempotency_keys
           WHERE scope = ${request.scope} AND key = ${request.key} AND expires_at > now()`.pipe(
          Effect.flatMap(Schema.decodeUnknown(Schema.Array(KeyRow)))
        )
        return yield* storedClaim(rows[0], request, sealer)
      }).pipe(orDieOnDb)

    /** Keeps `owner`'s claim alive. */
    const heartbeat = (scope: string, key: string, owner: string) =>
      sql`UPDATE idempotency_keys SET locked_at = now()
           WHERE scope = ${scope} AND key = ${key} AND owner = ${owner} AND status = 'in_progress'`.pipe(
        Effect.asVoid,
        orDieOnDb
      )

    /** Stores the answer; false when the claim was lost (taken over after a stall). */
    const complete = (scope: string, key: string, owner: string, answer: StoredAnswer) =>
      sql<{ key: string }>`
        UPDATE idempotency_keys
           SET status = 'completed', completed_at = now(), response_status = ${answer.status},
               response_headers = ${JSON.stringify({ ...answer.headers, "content-type": answer.contentType })}::jsonb,
               response_body = ${sealer.seal(answer.body, bindingOf(scope, key))}
         WHERE scope = ${scope} AND key = ${key} AND owner = ${owner} AND status = 'in_progress'
        RETURNING key`.pipe(Effect.map((rows) => rows.length > 0), orDieOnDb)

    /** Frees the key after a failed attempt, so a retry runs the request again. */
    const release = (scope: string, key: string, owner: string) =>
      sql`DELETE FROM idempotency_keys
           WHERE scope = ${scope} AND key = ${key} AND owner = ${owner} AND status = 'in_progress'`.pipe(
        Effect.asVoid,
        orDieOnDb
      )

    /** Deletes expired keys in batches; returns how many. */
    const sweepExpired = Effect.gen(function*() {
      let deleted = 0
      while (true) {
        const rows = yield* sql<{ n: number }>`
          WITH gone AS (
            DELETE FROM idempotency_keys
             WHERE (scope, key) IN (
               SELECT scope, key FROM idempotency_keys
                WHERE expires_at <= now()
                  AND (status = 'completed' OR locked_at <= now() - make_interval(secs => ${lock}))
                LIMIT 1000)
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM gone`
        const n = rows[0]?.n ?? 0
        deleted += n
        if (n < 1000) return deleted
      }
    }).pipe(orDieOnDb)

    return { config, claim, heartbeat, complete, release, sweepExpired } as const
  }),
  dependencies: [Secrets.Live]
}) {}

/** The background fiber deleting expired keys. */
export const IdempotencySweeperLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const store = yield* Idempotency
    const sweep = store.sweepExpired.pipe(
      Effect.tap((deleted) => deleted > 0 ? Effect.logDebug("swept idempotency keys").pipe(Effect.annotateLogs({ deleted })) : Effect.void),
      Effect.catchAllCause((cause) => Effect.logError("idempotency key sweep failed", cause)),
      Effect.withSpan("Idempotency.sweep")
    )
    yield* sweep.pipe(Effect.repeat(Schedule.spaced(store.config.sweepInterval)), Effect.forkScoped)
  })
)
