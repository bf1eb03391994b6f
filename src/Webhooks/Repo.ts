/**
 * Every statement on `webhooks`, the outbox `webhook_deliveries` and `webhook_attempts`, named for
 * the transition it performs; rows and requests are schemas (Rows.ts), failures are defects, each
 * has a span (atRepoBoundary). The delivery clock (due, lease, next attempt, endpoint health) is Effect's Clock,
 * passed as `now`, so TestClock drives the retry schedule; the rotation window is SQL's `now()`.
 * What each statement promises its callers is written on WebhooksRepoService (RepoService.ts).
 */
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"
import { recoveryStatements } from "./RepoRecovery.js"
import type { WebhooksRepoService } from "./RepoService.js"
import * as Rows from "./Rows.js"

/** Channel the outbox notifies on commit (Postgres only; embedded mode polls). */
export const deliveriesChannel = "hookline_webhook_deliveries"

/** A time `ms` milliseconds after `now` (before it, when negative). */
const plus = (sql: SqlClient.SqlClient, now: Date, ms: number) =>
  sql`(${now}::timestamptz + ${ms}::float8 * interval '1 millisecond')`

const stateColumns = (sql: SqlClient.SqlClient) => sql`url, enabled, events, disabled_reason, disabled_at`

const deliveryColumns = (sql: SqlClient.SqlClient) =>
  sql`d.id, d.event_id, d.event_type, d.status, d.attempts, d.last_status_code, d.last_error,
      d.next_attempt_at, d.created_at, d.completed_at`

/** The previous secret of webhook `alias`, while its rotation window lasts. */
const validPreviousSecret = (sql: SqlClient.SqlClient, alias: string) =>
  sql`CASE WHEN ${sql(alias)}.previous_secret_expires_at > now() THEN ${sql(alias)}.previous_secret_ciphertext END
        AS previous_secret_ciphertext`

/** The account webhook: set, retargeted, switched off, its secret rotated. */
const webhookStatements = (sql: SqlClient.SqlClient) => {
  const findWebhook = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: Rows.WebhookRow,
    execute: (accountId) =>
      sql`SELECT ${stateColumns(sql)}, secret_ciphertext, ${validPreviousSecret(sql, "w")}
            FROM webhooks w WHERE account_id = ${accountId}`
  })

  const createWebhook = SqlSchema.findOneOption({
    Request: Schema.Struct({ accountId: Schema.String, url: Schema.String, secretCiphertext: Schema.String, events: Rows.Selection }),
    Result: Rows.WebhookState,
    execute: (request) =>
      sql`INSERT INTO webhooks (account_id, url, enabled, secret_ciphertext, events)
          VALUES (${request.accountId}, ${request.url}, true, ${request.secretCiphertext}, ${request.events})
          ON CONFLICT (account_id) DO NOTHING
          RETURNING ${stateColumns(sql)}`
  })

  const retargetWebhook = SqlSchema.findOne({
    Request: Schema.Struct({ accountId: Schema.String, url: Schema.String, events: Schema.UndefinedOr(Rows.Selection) }),
    Result: Rows.WebhookState,
    execute: (request) =>
      sql`UPDATE webhooks
             SET url = ${request.url}, enabled = true, failing_since = NULL, disabled_reason = NULL, disabled_at = NULL,
                 ${request.events === undefined ? sql`` : sql`events = ${request.events},`} updated_at = now()
           WHERE account_id = ${request.accountId}
          RETURNING ${stateColumns(sql)}`
  })

  const switchOffWebhook = SqlSchema.void({
    Request: Schema.String,
    execute: (accountId) =>
      sql`UPDATE webhooks SET enabled = false, disabled_reason = NULL, disabled_at = NULL, updated_at = now()
           WHERE account_id = ${accountId}`
  })

  const disableForPlanLoss = SqlSchema.void({
    Request: Schema.String,
    execute: (accountId) => sql`UPDATE webhooks SET enabled = false, updated_at = now() WHERE account_id = ${accountId}`
  })

  const rotateSecret = SqlSchema.findOneOption({
    Request: Schema.Struct({ accountId: Schema.String, secretCiphertext: Schema.String, previousTtlMs: Rows.Millis }),
    Result: Rows.WebhookState,
    execute: (request) =>
      sql`UPDATE webhooks
             SET previous_secret_ciphertext = secret_ciphertext,
                 previous_secret_expires_at = now() + ${request.previousTtlMs}::float8 * interval '1 millisecond',
                 secret_ciphertext = ${request.secretCiphertext},
                 updated_at = now()
           WHERE account_id = ${request.accountId}
          RETURNING ${stateColumns(sql)}`
  })

  return { findWebhook, createWebhook, retargetWebhook, switchOffWebhook, disableForPlanLoss, rotateSecret } as const
}

/** The outbox: events in, the dispatchers woken, the backlog measured. */
const outboxStatements = (sql: SqlClient.SqlClient) => {
  /**
   * Records an event for the account's webhook when it is enabled and takes this type; joins
   * the caller's transaction. Returns the delivery id, None when nothing was queued.
   */
  const enqueueDelivery = SqlSchema.findOneOption({
    Request: Rows.EnqueueRequest,
    Result: Schema.Struct({ id: Schema.String }),
    execute: (request) =>
      sql`INSERT INTO webhook_deliveries (id, event_id, account_id, event_type, payload, body, next_attempt_at, created_at)
          SELECT ${request.deliveryId}, ${request.eventId}, ${request.accountId}, ${request.type}, ${request.body}::jsonb,
                 ${request.body}, ${request.now}, ${request.now}
            FROM webhooks
           WHERE account_id = ${request.accountId} AND enabled AND (events IS NULL OR ${request.type} = ANY (events))
          RETURNING id`
  })

  const notifyDispatchers = SqlSchema.void({
    Request: Schema.String,
    execute: (deliveryId) => sql`SELECT pg_notify(${deliveriesChannel}, ${deliveryId})`
  })

  const outboxBacklog = SqlSchema.findOne({
    Request: Rows.Now,
    Result: Schema.Struct({ pending: Schema.Number, oldest_due_ms: Schema.Number }),
    execute: (now) =>
      sql`SELECT count(*)::int AS pending,
                 COALESCE(extract(epoch FROM ${now}::timestamptz - min(next_attempt_at) FILTER (WHERE next_attempt_at <= ${now}))
                          * 1000, 0)::float8 AS oldest_due_ms
            FROM webhook_deliveries WHERE status = 'pending'`
  })

  return { enqueueDelivery, notifyDispatchers, outboxBacklog } as const
}

/** The delivery log: pages, one delivery, a retry, the retention sweep. */
const deliveryLogStatements = (sql: SqlClient.SqlClient) => {
  const listDeliveries = SqlSchema.findAll({
    Request: Rows.ListRequest,
    Result: Rows.DeliveryRow,
    execute: (request) =>
      sql`SELECT ${deliveryColumns(sql)} FROM webhook_deliveries d
           WHERE d.account_id = ${request.accountId}
             ${request.status === undefined ? sql`` : sql`AND d.status = ${request.status}`}
             ${request.afterId === undefined ? sql`` : sql`AND d.id < ${request.afterId}`}
           ORDER BY d.id DESC
           LIMIT ${request.limit}`
  })

  const findDelivery = SqlSchema.findOneOption({
    Request: Schema.Struct({ accountId: Schema.String, id: Schema.String }),
    Result: Rows.DeliveryRow,
    execute: (request) =>
      sql`SELECT ${deliveryColumns(sql)} FROM webhook_deliveries d WHERE d.id = ${request.id} AND d.account_id = ${request.accountId}`
  })

  /**
   * A pending or failed delivery becomes due at `now`, when the webhook is enabled and no
   * dispatcher holds it. None: left as it is.
   */
  const requeueDelivery = SqlSchema.findOneOption({
    Request: Schema.Struct({ accountId: Schema.String, id: Schema.String, now: Rows.Now }),
    Result: Rows.DeliveryRow,
    execute: (request) =>
      sql`UPDATE webhook_deliveries d
             SET status = 'pending', next_attempt_at = ${request.now}, completed_at = NULL
            FROM webhooks w
           WHERE d.id = ${request.id} AND d.account_id = ${request.accountId} AND d.status <> 'delivered'
             AND d.claim_token IS NULL AND w.account_id = d.account_id AND w.enabled
          RETURNING ${deliveryColumns(sql)}`
  })

  /** Deletes up to `batch` finished deliveries (and their attempts) created before the cutoff; returns how many. */
  const sweepFinishedDeliveries = SqlSchema.findOne({
    Request: Schema.Struct({ retentionMs: Rows.Millis, batch: Schema.Number, now: Rows.Now }),
    Result: Schema.Struct({ swept: Schema.Number }),
    execute: (request) =>
      sql`WITH gone AS (
            DELETE FROM webhook_deliveries WHERE id IN (
              SELECT id FROM webhook_deliveries
               WHERE created_at < ${plus(sql, request.now, -request.retentionMs)} AND status <> 'pending'
               ORDER BY created_at LIMIT ${request.batch})
            RETURNING 1
          )
          SELECT count(*)::int AS swept FROM gone`
  })

  return { listDeliveries, findDelivery, requeueDelivery, sweepFinishedDeliveries } as const
}

/** The statement of recordAttempt: the attempt row, the delivery's next state, the endpoint's health. */
const recordAttemptSql = (sql: SqlClient.SqlClient, request: typeof Rows.AttemptRecord.Encoded) => {
  const failingTooLong = sql`w.failing_since <= ${plus(sql, request.now, -request.disableAfterMs)}`
  const disabledReason = request.gone ? sql`'gone'` : sql`CASE WHEN ${failingTooLong} THEN 'failing' END`
  const health = request.delivered
    ? sql`UPDATE webhooks w SET failing_since = NULL
           WHERE w.account_id = ${request.accountId} AND w.failing_since IS NOT NULL AND EXISTS (SELECT 1 FROM claim)`
    : sql`UPDATE webhooks w
             SET failing_since = COALESCE(w.failing_since, ${request.now}),
                 enabled = ${disabledReason} IS NULL,
                 disabled_reason = ${disabledReason},
                 disabled_at = CASE WHEN ${disabledReason} IS NULL THEN NULL ELSE ${request.now}::timestamptz END,
                 updated_at = now()
           WHERE w.account_id = ${request.accountId} AND w.enabled AND EXISTS (SELECT 1 FROM claim)
             AND (w.failing_since IS NULL OR ${request.gone} OR ${failingTooLong})`
  return sql`
    WITH claim AS (
      SELECT 1 FROM webhook_deliveries WHERE id = ${request.deliveryId} AND claim_token = ${request.token}
    ),
    attempt AS (
      INSERT INTO webhook_attempts (delivery_id, attempt, dispatcher, status_code, duration_ms, error, attempted_at)
      VALUES (${request.deliveryId}, ${request.attempt}, ${request.dispatcher}, ${request.statusCode},
              ${Math.round(request.durationMs)}, ${request.error}, ${request.now})
    ),
    health AS (${health})
    UPDATE webhook_deliveries
       SET status = ${request.status},
           next_attempt_at = ${plus(sql, request.now, request.delayMs)},
           last_status_code = ${request.statusCode},
           last_error = ${request.error},
           completed_at = ${request.status === "pending" ? sql`NULL` : sql`${request.now}::timestamptz`},
           claim_token = NULL
     WHERE id = ${request.deliveryId} AND claim_token = ${request.token}`
}

/** The dispatcher's transitions: claim, record, drop, release. */
const dispatchStatements = (sql: SqlClient.SqlClient) => {
  /**
   * Claims up to `limit` due deliveries under `token`: counts the attempt and leases each for
   * `leaseMs`, so no other dispatcher takes it meanwhile and no transaction stays open.
   */
  const claimDueDeliveries = SqlSchema.findAll({
    Request: Schema.Struct({ limit: Schema.Number, token: Schema.String, leaseMs: Rows.Millis, now: Rows.Now }),
    Result: Rows.ClaimedRow,
    execute: (request) =>
      sql`WITH due AS (
            SELECT id, account_id FROM webhook_deliveries
             WHERE status = 'pending' AND next_attempt_at <= ${request.now}
             ORDER BY next_attempt_at
             LIMIT ${request.limit}
             FOR UPDATE SKIP LOCKED
          )
          UPDATE webhook_deliveries d
             SET attempts = d.attempts + 1,
                 next_attempt_at = ${plus(sql, request.now, request.leaseMs)},
                 claim_token = ${request.token}
            FROM due LEFT JOIN webhooks w ON w.account_id = due.account_id
           WHERE d.id = due.id
          RETURNING d.id, d.event_id, d.account_id, d.attempts, COALESCE(d.body, d.payload::text) AS body,
                    w.url, w.enabled, w.secret_ciphertext, ${validPreviousSecret(sql, "w")}`
  })

  const untilNextDue = SqlSchema.findOne({
    Request: Rows.Now,
    Result: Schema.Struct({ wait_ms: Schema.NullOr(Schema.Number) }),
    execute: (now) =>
      sql`SELECT (EXTRACT(EPOCH FROM min(next_attempt_at) - ${now}::timestamptz) * 1000)::float8 AS wait_ms
            FROM webhook_deliveries WHERE status = 'pending'`
  })

  /**
   * An attempt's outcome, in one statement: the attempt row (it was made, so it is always
   * recorded), and, guarded by the claim token, the delivery's next state and the endpoint's
   * health (a streak starts, ends, or disables the webhook; written only when something changes).
   */
  const recordAttempt = SqlSchema.void({
    Request: Rows.AttemptRecord,
    execute: (request) => recordAttemptSql(sql, request)
  })

  const dropForDisabledWebhook = SqlSchema.void({
    Request: Rows.ClaimRequest,
    execute: (request) =>
      sql`UPDATE webhook_deliveries
             SET status = 'failed', attempts = attempts - 1, last_error = 'webhook disabled',
                 completed_at = ${request.now}, claim_token = NULL
           WHERE id = ${request.deliveryId} AND claim_token = ${request.token}`
  })

  const releaseClaim = SqlSchema.void({
    Request: Rows.ClaimRequest,
    execute: (request) =>
      sql`UPDATE webhook_deliveries
             SET attempts = attempts - 1, next_attempt_at = ${request.now}, claim_token = NULL
           WHERE id = ${request.deliveryId} AND claim_token = ${request.token}`
  })

  return { claimDueDeliveries, untilNextDue, recordAttempt, dropForDisabledWebhook, releaseClaim } as const
}

const make = Effect.map(SqlClient.SqlClient, (sql) =>
  WebhooksRepo.of(atRepoBoundary("WebhooksRepo", {
    ...webhookStatements(sql), ...outboxStatements(sql), ...deliveryLogStatements(sql), ...dispatchStatements(sql),
    ...recoveryStatements(sql)
  })))

export class WebhooksRepo extends Context.Service<WebhooksRepo, WebhooksRepoService>()("hookline/WebhooksRepo") {
  static readonly layer = Layer.effect(WebhooksRepo, make)
}
