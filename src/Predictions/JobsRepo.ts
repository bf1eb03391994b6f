/**
 * The prediction job's state machine (docs/behaviour.md, "Clip scoring"), one statement per transition:
 *
 *   awaiting_upload ──file lands + 20 reserved──▶ queued ──claimed──▶ running ──▶ succeeded (hold settled)
 *        │   ▲ credits short: stays, file kept;         ▲               │   └────▶ failed (hold refunded)
 *        │   └ POST /v1/predict retries the reserve     └─ heartbeat ───┘
 *        │                                                 stopped (≤ 3 attempts)
 *        └─ link expired unused ─▶ failed (upload_expired)      queued > 1 h ─▶ failed (expired, refunded)
 *
 *   createUploadLink (UploadsRepo)  → awaiting_upload
 *   queueJob                        awaiting_upload → queued
 *   claimNextJob                    queued → running
 *   heartbeat                       running → running (this worker's claim kept)
 *   handBack, requeueStalled        running → queued
 *   finishJob (guarded: FinishGuard) any of the above → succeeded | failed
 *
 * Every transition is one conditional UPDATE (`WHERE status = …`), so concurrent callers, workers
 * and sweepers in any number of processes agree on a single winner. Times come from the caller
 * (Effect's Clock), never from the database's now(), so a TestClock drives every timeout.
 * Money is not moved here: the jobs service calls the Ledger in the same transaction.
 */
import { Context, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"
import { ClaimedJob, Finish, FinishGuard, moved, PredictionRow } from "./Rows.js"

const Now = Schema.Date
const Id = Schema.Struct({ id: Schema.String })

const Finished = Schema.Struct({ hold_id: Schema.NullOr(Schema.String), account_id: Schema.String })
const Scan = Schema.Struct({ before: Now, limit: Schema.Number })
const Claim = Schema.Struct({ workerId: Schema.String, now: Now, queuedAfter: Now })
const Held = Schema.Struct({ id: Schema.String, workerId: Schema.String, now: Now })

/** The statements on `predictions`, as the jobs service, the gauges and the tests' in-memory twin use them. */
export interface JobsRepoService {
  readonly findPrediction: (id: string) => Effect.Effect<Option.Option<PredictionRow>>
  /** Visible only to the key that created it, and only while created after `createdAfter`. */
  readonly findVisiblePrediction: (
    request: { readonly id: string; readonly keyId: string; readonly createdAfter: Date }
  ) => Effect.Effect<Option.Option<PredictionRow>>
  /** Locks the job for a landing, only while its key is live and its account not suspended. */
  readonly lockForLanding: (
    id: string
  ) => Effect.Effect<Option.Option<{ readonly status: string; readonly account_id: string; readonly key_id: string }>>
  /** Locks the job of the key's upload for retry start (created after `createdAfter`). */
  readonly lockForRetryStart: (
    request: { readonly uploadId: string; readonly keyId: string; readonly createdAfter: Date }
  ) => Effect.Effect<Option.Option<{ readonly prediction_id: string; readonly status: string; readonly upload_status: string }>>
  /** awaiting_upload → queued with its hold; false when the job was not awaiting_upload. */
  readonly queueJob: (
    request: { readonly id: string; readonly holdId: string; readonly traceParent: string | null; readonly now: Date }
  ) => Effect.Effect<boolean>
  /** queued → running: the oldest queued job (after `queuedAfter`) of the account with the fewest running. */
  readonly claimNextJob: (
    request: { readonly workerId: string; readonly now: Date; readonly queuedAfter: Date }
  ) => Effect.Effect<Option.Option<ClaimedJob>>
  /** False as soon as the job is no longer this worker's. */
  readonly heartbeat: (request: typeof Held.Type) => Effect.Effect<boolean>
  /** Shutdown: running → queued, this attempt not counted; false when the worker no longer held it. */
  readonly handBack: (request: typeof Held.Type) => Effect.Effect<boolean>
  /** running → queued for a job that stopped heart-beating before `heartbeatBefore`, while it has attempts left. */
  readonly requeueStalled: (
    request: { readonly id: string; readonly heartbeatBefore: Date; readonly maxAttempts: number; readonly now: Date }
  ) => Effect.Effect<boolean>
  /** The terminal transition; None when the row no longer meets its guard (another process won). */
  readonly finishJob: (finish: Finish) => Effect.Effect<Option.Option<{ readonly hold_id: string | null; readonly account_id: string }>>
  /** Running jobs whose heartbeat is at or before `before`. */
  readonly findStalled: (scan: typeof Scan.Type) => Effect.Effect<ReadonlyArray<{ readonly id: string }>>
  /** Jobs queued at or before `before`, oldest first. */
  readonly findQueuedBefore: (scan: typeof Scan.Type) => Effect.Effect<ReadonlyArray<{ readonly id: string }>>
  /** Jobs whose clip landed unpaid at or before `before`. */
  readonly findUnpaidBefore: (scan: typeof Scan.Type) => Effect.Effect<ReadonlyArray<{ readonly id: string }>>
  /** The metrics gauges: jobs per state. */
  readonly countByStatus: () => Effect.Effect<ReadonlyArray<{ readonly status: string; readonly n: number }>>
  /** The metrics gauges: the age in seconds of the oldest queued job at `now` (0: none). */
  readonly oldestQueuedSeconds: (now: Date) => Effect.Effect<number>
  /** Announces queued work to every process's workers: NOTIFY, delivered when the surrounding transaction commits. */
  readonly announceQueued: () => Effect.Effect<void>
}

/** The reads: a prediction as its owner sees it, and the row locks of the consume step. */
const reads = (sql: SqlClient.SqlClient) => {
  const selectPrediction = sql`
    SELECT p.id, p.account_id, p.status, p.hold_id, p.input_duration_sec, p.result, p.error_type, p.error_message,
           p.created_at, p.completed_at, u.id AS upload_id, u.status AS upload_status
      FROM predictions p JOIN uploads u ON u.prediction_id = p.id`

  const findPrediction = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: PredictionRow,
    execute: (id) => sql`${selectPrediction} WHERE p.id = ${id}`
  })

  const findVisiblePrediction = SqlSchema.findOneOption({
    Request: Schema.Struct({ id: Schema.String, keyId: Schema.String, createdAfter: Now }),
    Result: PredictionRow,
    execute: ({ createdAfter, id, keyId }) =>
      sql`${selectPrediction} WHERE p.id = ${id} AND p.key_id = ${keyId} AND p.created_at > ${createdAfter}`
  })

  /** A landing may queue the job only while its key is live and its account not suspended. */
  const lockForLanding = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: Schema.Struct({ status: Schema.String, account_id: Schema.String, key_id: Schema.String }),
    execute: (id) =>
      sql`SELECT p.status, p.account_id, p.key_id FROM predictions p JOIN api_keys k ON k.id = p.key_id JOIN accounts a ON a.id = p.account_id
           WHERE p.id = ${id} AND k.revoked_at IS NULL AND NOT a.suspended FOR UPDATE OF p`
  })

  const lockForRetryStart = SqlSchema.findOneOption({
    Request: Schema.Struct({ uploadId: Schema.String, keyId: Schema.String, createdAfter: Now }),
    Result: Schema.Struct({ prediction_id: Schema.String, status: Schema.String, upload_status: Schema.String }),
    execute: ({ createdAfter, keyId, uploadId }) =>
      sql`SELECT p.id AS prediction_id, p.status, u.status AS upload_status
            FROM uploads u JOIN predictions p ON p.id = u.prediction_id
           WHERE u.id = ${uploadId} AND u.key_id = ${keyId} AND p.created_at > ${createdAfter}
             FOR UPDATE OF p`
  })

  return {
    findPrediction,
    findVisiblePrediction,
    lockForLanding,
    lockForRetryStart
  }
}

/** The transitions between awaiting_upload, queued and running. */
const transitions = (sql: SqlClient.SqlClient) => {
  const queueJob = SqlSchema.findOneOption({
    Request: Schema.Struct({ id: Schema.String, holdId: Schema.String, traceParent: Schema.NullOr(Schema.String), now: Now }),
    Result: Id,
    execute: ({ holdId, id, now, traceParent }) =>
      sql`UPDATE predictions SET status = 'queued', hold_id = ${holdId}, queued_at = ${now}, trace_parent = ${traceParent}
           WHERE id = ${id} AND status = 'awaiting_upload'
          RETURNING id`
  })

  /**
   * Fair across accounts: the oldest queued job of the account with the fewest jobs running,
   * so one account's queue cannot hold every worker while another's job waits. Under several
   * processes two claims may read the same running counts (fairness is then approximate for a
   * moment), but SKIP LOCKED and the status guard still give every job exactly one claim.
   */
  const claimNextJob = SqlSchema.findOneOption({
    Request: Claim,
    Result: ClaimedJob,
    execute: ({ now, queuedAfter, workerId }) =>
      sql`UPDATE predictions p
             SET status = 'running', attempts = attempts + 1, claimed_by = ${workerId},
                 heartbeat_at = ${now}, started_at = COALESCE(started_at, ${now})
           WHERE id = (
             SELECT q.id FROM predictions q
               LEFT JOIN (SELECT account_id, count(*) AS jobs FROM predictions WHERE status = 'running' GROUP BY account_id) running
                 ON running.account_id = q.account_id
              WHERE q.status = 'queued' AND q.queued_at > ${queuedAfter}
              ORDER BY COALESCE(running.jobs, 0), q.queued_at, q.id
              FOR UPDATE OF q SKIP LOCKED
              LIMIT 1)
             AND p.status = 'queued'
          RETURNING p.id, p.attempts, p.trace_parent, (SELECT u.blob_key FROM uploads u WHERE u.prediction_id = p.id) AS blob_key`
  })

  const heartbeat = SqlSchema.findOneOption({
    Request: Held,
    Result: Id,
    execute: ({ id, now, workerId }) =>
      sql`UPDATE predictions SET heartbeat_at = ${now}
           WHERE id = ${id} AND status = 'running' AND claimed_by = ${workerId} RETURNING id`
  })

  /** Shutdown: the job goes straight back to the queue, this attempt not counted. */
  const handBack = SqlSchema.findOneOption({
    Request: Held,
    Result: Id,
    execute: ({ id, now, workerId }) =>
      sql`UPDATE predictions
             SET status = 'queued', claimed_by = NULL, heartbeat_at = NULL, queued_at = ${now}, attempts = attempts - 1
           WHERE id = ${id} AND status = 'running' AND claimed_by = ${workerId}
          RETURNING id`
  })

  /** A running job whose worker stopped heart-beating goes back to the queue, while it has attempts left. */
  const requeueStalled = SqlSchema.findOneOption({
    Request: Schema.Struct({ id: Schema.String, heartbeatBefore: Now, maxAttempts: Schema.Number, now: Now }),
    Result: Id,
    execute: ({ heartbeatBefore, id, maxAttempts, now }) =>
      sql`UPDATE predictions SET status = 'queued', claimed_by = NULL, heartbeat_at = NULL, queued_at = ${now}
           WHERE id = ${id} AND status = 'running' AND heartbeat_at <= ${heartbeatBefore} AND attempts < ${maxAttempts}
          RETURNING id`
  })

  return {
    queueJob: (request: Parameters<typeof queueJob>[0]) => moved(queueJob(request)),
    claimNextJob,
    heartbeat: (request: typeof Held.Type) => moved(heartbeat(request)),
    handBack: (request: typeof Held.Type) => moved(handBack(request)),
    requeueStalled: (request: Parameters<typeof requeueStalled>[0]) => moved(requeueStalled(request))
  }
}

/** The terminal transition, and the guards under which each caller may make it. */
const finishing = (sql: SqlClient.SqlClient) => {
  const guardSql = (guard: typeof FinishGuard.Encoded, id: string) => {
    switch (guard._tag) {
      case "HeldBy":
        return sql`status = 'running' AND claimed_by = ${guard.workerId}`
      case "AwaitingUpload":
        return sql`status = 'awaiting_upload'`
      case "StalledOut":
        return sql`status = 'running' AND heartbeat_at <= ${guard.heartbeatBefore} AND attempts >= ${guard.maxAttempts}`
      case "QueuedBefore":
        return sql`status = 'queued' AND queued_at <= ${guard.queuedBefore}`
      case "UnpaidBefore":
        return sql`status = 'awaiting_upload' AND EXISTS (
          SELECT 1 FROM uploads WHERE prediction_id = ${id} AND status = 'received' AND received_at <= ${guard.receivedBefore})`
    }
  }

  const finishJob = SqlSchema.findOneOption({
    Request: Finish,
    Result: Finished,
    execute: (finish) =>
      sql`UPDATE predictions
             SET status = ${finish.status},
                 result = ${finish.result}::jsonb,
                 error_type = ${finish.errorType},
                 error_message = ${finish.errorMessage},
                 input_duration_sec = COALESCE(${finish.durationSec}::double precision, input_duration_sec),
                 completed_at = ${finish.now}, claimed_by = NULL
           WHERE id = ${finish.id} AND ${guardSql(finish.guard, finish.id)}
          RETURNING hold_id, account_id`
  })

  return { finishJob }
}

/** What the sweeper looks for, and the metrics' counts. */
const scans = (sql: SqlClient.SqlClient) => {
  const idsOf = (execute: (scan: typeof Scan.Type) => Effect.Effect<ReadonlyArray<unknown>, unknown>) =>
    SqlSchema.findAll({ Request: Scan, Result: Id, execute })

  const findStalled = idsOf(({ before, limit }) =>
    sql`SELECT id FROM predictions WHERE status = 'running' AND heartbeat_at <= ${before} LIMIT ${limit}`)
  const findQueuedBefore = idsOf(({ before, limit }) =>
    sql`SELECT id FROM predictions WHERE status = 'queued' AND queued_at <= ${before} ORDER BY queued_at LIMIT ${limit}`)
  const findUnpaidBefore = idsOf(({ before, limit }) =>
    sql`SELECT p.id FROM predictions p JOIN uploads u ON u.prediction_id = p.id
         WHERE p.status = 'awaiting_upload' AND u.status = 'received' AND u.received_at <= ${before} LIMIT ${limit}`)

  /** The metrics gauges: jobs per state, and the age of the oldest queued one at `now`. */
  const countByStatus = SqlSchema.findAll({
    Request: Schema.Void,
    Result: Schema.Struct({ status: Schema.String, n: Schema.Number }),
    execute: () => sql`SELECT status, count(*)::int AS n FROM predictions GROUP BY status`
  })
  const oldestQueuedSeconds = SqlSchema.findOne({
    Request: Now,
    Result: Schema.Struct({ seconds: Schema.Number }),
    execute: (now) =>
      sql`SELECT COALESCE(extract(epoch FROM ${now}::timestamptz - min(queued_at))::float8, 0) AS seconds
            FROM predictions WHERE status = 'queued'`
  })

  return {
    findStalled,
    findQueuedBefore,
    findUnpaidBefore,
    countByStatus: () => countByStatus(undefined),
    oldestQueuedSeconds: (now: Date) => Effect.map(oldestQueuedSeconds(now), (row) => row.seconds)
  }
}

/** Postgres channel on which queued jobs are announced to every process's workers. */
export const jobsChannel = "hookline_predictions"

/** Announces queued work: NOTIFY is delivered when the surrounding transaction commits. */
const announcements = (sql: SqlClient.SqlClient) => ({
  announceQueued: () => Effect.asVoid(sql`SELECT pg_notify(${jobsChannel}, 'queued')`)
})

const make = Effect.map(SqlClient.SqlClient, (sql) =>
  JobsRepo.of(atRepoBoundary("JobsRepo", { ...reads(sql), ...transitions(sql), ...finishing(sql), ...scans(sql), ...announcements(sql) })))

export class JobsRepo extends Context.Service<JobsRepo, JobsRepoService>()("hookline/JobsRepo") {
  static readonly layer = Layer.effect(JobsRepo, make)
}
