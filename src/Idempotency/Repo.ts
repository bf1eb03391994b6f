/**
 * Every statement on `idempotency_keys`, named for the transition it performs: claim, look up,
 * keep alive, complete, release, sweep. Times are the database's (`now()`), so server processes
 * with skewed clocks agree on expiry and stalled claims. Database and decoding failures are defects.
 *
 * The claim, the heartbeat and the release wait at most IDEMPOTENCY_OUTCOME_WAIT for a key's row
 * that another transaction holds (the request's own, committing its answer, or one cut off from
 * its server with its COMMIT unseen), then fail with lock_not_available (`isKeyHeld`): such a
 * transaction may hold the row for as long as PostgreSQL keeps its session, and a request must not.
 */
import { Config, Context, Duration, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, SqlError, SqlSchema } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"
import { commitWithoutFlush } from "../Sql.js"

/** A key's row as a repeat sees it (the body still sealed). */
export const KeyRow = Schema.Struct({
  fingerprint: Schema.String,
  method: Schema.String,
  path: Schema.String,
  status: Schema.Literals(["in_progress", "completed"]),
  request_id: Schema.NullOr(Schema.String),
  response_status: Schema.NullOr(Schema.Number),
  response_headers: Schema.NullOr(Schema.Record(Schema.String, Schema.String)),
  response_body: Schema.NullOr(Schema.String)
})
export type KeyRow = typeof KeyRow.Type

const KeyId = Schema.Struct({ scope: Schema.String, key: Schema.String })
const OwnedKey = Schema.Struct({ ...KeyId.fields, owner: Schema.String })

const ClaimRequest = Schema.Struct({
  ...OwnedKey.fields,
  fingerprint: Schema.String,
  method: Schema.String,
  path: Schema.String,
  requestId: Schema.String,
  ttlSeconds: Schema.Number,
  lockSeconds: Schema.Number
})
export type ClaimRequest = typeof ClaimRequest.Type

const Completion = Schema.Struct({
  ...OwnedKey.fields,
  status: Schema.Number,
  /** Response headers as stored (content-type included), and the sealed body. */
  headers: Schema.Record(Schema.String, Schema.String),
  sealedBody: Schema.String
})
export type Completion = typeof Completion.Type

/** How long a statement on a key waits for its row while another transaction holds it. */
export const KeyLockWait = Config.Duration("IDEMPOTENCY_OUTCOME_WAIT").pipe(Config.withDefault(Duration.seconds(1)))

/** PostgreSQL's lock_not_available: a statement here gave up waiting for a key's row (a defect past the repository). */
export const isKeyHeld = (defect: unknown): boolean => {
  if (!SqlError.isSqlError(defect)) return false
  const cause: unknown = defect.reason.cause
  return typeof cause === "object" && cause !== null && "code" in cause && cause.code === "55P03"
}

/**
 * A FROM item bounding this statement's wait for a row lock (set_config's `true`: for this
 * statement's own transaction only, like commitWithoutFlush).
 */
const lockWaitAtMost = (sql: SqlClient.SqlClient, millis: string) =>
  sql`(SELECT set_config('lock_timeout', ${millis}, true)) AS lock_wait_only`

/** Expired keys deleted per sweep statement. */
const sweepBatch = 1000

/**
 * Inserts the key 'in_progress' for `owner`, or takes over an expired row or a stalled claim
 * of the same request. Some row when claimed. The claim's commit does not wait for the disk
 * (synchronous_commit off, for this statement only): whatever the request then commits flushes
 * the log past the claim, and a claim lost with a database crash before that guarded nothing.
 */
const claimKey = (sql: SqlClient.SqlClient, lockWait: string) =>
  SqlSchema.findOneOption({
    Request: ClaimRequest,
    Result: Schema.Struct({ owner: Schema.String }),
    execute: (claim) =>
      sql`
        INSERT INTO idempotency_keys AS k
               (scope, key, fingerprint, method, path, status, owner, locked_at, request_id, created_at, expires_at)
        SELECT ${claim.scope}, ${claim.key}, ${claim.fingerprint}, ${claim.method}, ${claim.path},
               'in_progress', ${claim.owner}, now(), ${claim.requestId}, now(), now() + make_interval(secs => ${claim.ttlSeconds})
          FROM ${sql.literal(commitWithoutFlush)}, ${lockWaitAtMost(sql, lockWait)}
        ON CONFLICT (scope, key) DO UPDATE
           SET fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
               status = 'in_progress', owner = EXCLUDED.owner, locked_at = now(), request_id = EXCLUDED.request_id,
               response_status = NULL, response_headers = NULL, response_body = NULL,
               created_at = now(), completed_at = NULL, expires_at = EXCLUDED.expires_at
         WHERE k.expires_at <= now()
            OR (k.status = 'in_progress' AND k.locked_at <= now() - make_interval(secs => ${claim.lockSeconds})
                AND k.fingerprint = EXCLUDED.fingerprint)
        RETURNING k.owner`
  })

/** The unexpired row of a key. */
const findLiveKey = (sql: SqlClient.SqlClient) =>
  SqlSchema.findOneOption({
    Request: KeyId,
    Result: KeyRow,
    execute: ({ key, scope }) =>
      sql`
        SELECT fingerprint, method, path, status, request_id, response_status, response_headers, response_body
          FROM idempotency_keys
         WHERE scope = ${scope} AND key = ${key} AND expires_at > now()`
  })

/** Keeps `owner`'s claim alive. */
const touchClaim = (sql: SqlClient.SqlClient, lockWait: string) =>
  SqlSchema.void({
    Request: OwnedKey,
    execute: ({ key, owner, scope }) =>
      sql`UPDATE idempotency_keys SET locked_at = now() FROM ${lockWaitAtMost(sql, lockWait)}
           WHERE scope = ${scope} AND key = ${key} AND owner = ${owner} AND status = 'in_progress'`
  })

/** Stores the answer; None when the claim was lost (taken over after a stall). */
const completeKey = (sql: SqlClient.SqlClient) =>
  SqlSchema.findOneOption({
    Request: Completion,
    Result: Schema.Struct({ key: Schema.String }),
    execute: (done) =>
      sql`
        UPDATE idempotency_keys
           SET status = 'completed', completed_at = now(), response_status = ${done.status},
               response_headers = ${JSON.stringify(done.headers)}::jsonb, response_body = ${done.sealedBody}
         WHERE scope = ${done.scope} AND key = ${done.key} AND owner = ${done.owner} AND status = 'in_progress'
        RETURNING key`
  })

/**
 * Deletes `owner`'s claim, so a retry runs the request again; true when it did. A completed row
 * stays: an answer committed with its effect (Http.ts) is never released. The DELETE waits on the
 * row lock of a transaction still completing the row (at most the lock wait), so its answer is exact.
 */
const releaseKey = (sql: SqlClient.SqlClient, lockWait: string) =>
  SqlSchema.findAll({
    Request: OwnedKey,
    Result: Schema.Struct({ key: Schema.String }),
    execute: ({ key, owner, scope }) =>
      sql`DELETE FROM idempotency_keys USING ${lockWaitAtMost(sql, lockWait)}
           WHERE scope = ${scope} AND key = ${key} AND owner = ${owner} AND status = 'in_progress'
          RETURNING key`
  })

/** Deletes up to `sweepBatch` expired keys (stalled claims past the lock timeout too); how many. */
const deleteExpiredBatch = (sql: SqlClient.SqlClient) =>
  SqlSchema.findOne({
    Request: Schema.Number,
    Result: Schema.Struct({ n: Schema.Number }),
    execute: (lockSeconds) =>
      sql`
        WITH gone AS (
          DELETE FROM idempotency_keys
           WHERE (scope, key) IN (
             SELECT scope, key FROM idempotency_keys
              WHERE expires_at <= now()
                AND (status = 'completed' OR locked_at <= now() - make_interval(secs => ${lockSeconds}))
              LIMIT ${sweepBatch})
          RETURNING 1
        )
        SELECT count(*)::int AS n FROM gone`
  })

/**
 * The statements on `idempotency_keys`, as the Idempotency service and the tests' in-memory twin
 * (RepoMemory.ts) use them. The claim, the touch and the release die with lock_not_available
 * (`isKeyHeld`) when another transaction holds the key's row past IDEMPOTENCY_OUTCOME_WAIT.
 */
export interface IdempotencyRepoService {
  /** Claims the key for its owner: a new row, an expired one, or a stalled claim of the same fingerprint; None: the key holds another row. */
  readonly claimKey: (claim: ClaimRequest) => Effect.Effect<Option.Option<{ readonly owner: string }>>
  /** The key's row, unless it expired. */
  readonly findLiveKey: (scope: string, key: string) => Effect.Effect<Option.Option<KeyRow>>
  /** Keeps `owner`'s claim alive. */
  readonly touchClaim: (scope: string, key: string, owner: string) => Effect.Effect<void>
  /** Stores the answer; None when the key is not `owner`'s claim in progress any more (taken over after a stall). */
  readonly completeKey: (completion: Completion) => Effect.Effect<Option.Option<{ readonly key: string }>>
  /** Deletes `owner`'s claim in progress, so a retry runs the request again; false when the key holds no such claim. */
  readonly releaseKey: (scope: string, key: string, owner: string) => Effect.Effect<boolean>
  /** Deletes the expired keys (a claim only once `lockSeconds` have passed without a heartbeat); how many. */
  readonly sweepExpired: (lockSeconds: number) => Effect.Effect<number>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const lockWait = String(Math.max(1, Math.round(Duration.toMillis(yield* KeyLockWait))))

  const claim = claimKey(sql, lockWait)
  const find = findLiveKey(sql)
  const touch = touchClaim(sql, lockWait)
  const complete = completeKey(sql)
  const release = releaseKey(sql, lockWait)
  const deleteExpired = deleteExpiredBatch(sql)

  return IdempotencyRepo.of(atRepoBoundary("IdempotencyRepo", {
    claimKey: claim,
    findLiveKey: (scope: string, key: string) => find({ scope, key }),
    touchClaim: (scope: string, key: string, owner: string) => touch({ scope, key, owner }),
    completeKey: complete,
    releaseKey: (scope: string, key: string, owner: string) => Effect.map(release({ scope, key, owner }), (rows) => rows.length > 0),
    /** Deletes expired keys batch by batch; how many in all. */
    sweepExpired: (lockSeconds: number) =>
      Effect.gen(function*() {
        let deleted = 0
        while (true) {
          const { n } = yield* deleteExpired(lockSeconds)
          deleted += n
          if (n < sweepBatch) return deleted
        }
      })
  }))
})

export class IdempotencyRepo extends Context.Service<IdempotencyRepo, IdempotencyRepoService>()("hookline/IdempotencyRepo") {
  static readonly layer = Layer.effect(IdempotencyRepo, make)
}
