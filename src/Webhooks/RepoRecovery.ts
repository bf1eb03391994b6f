/**
 * Recovering deliveries after an outage: one statement makes every failed delivery of an account
 * created since a time (failed after its schedule, or dropped while the webhook was disabled) due
 * again, oldest first, one every `paceMs` from `now`, so a receiver coming back is not flooded.
 * Deliveries a dispatcher holds are left to it; nothing is queued while the webhook is disabled.
 */
import { Schema } from "effect"
import { type SqlClient, SqlSchema } from "effect/sql"
import * as Rows from "./Rows.js"

export const RecoverRequest = Schema.Struct({ accountId: Schema.String, since: Rows.Now, now: Rows.Now, paceMs: Rows.Millis })

export const Recovered = Schema.Struct({ queued: Schema.Number, last_attempt_at: Schema.NullOr(Schema.Date) })

export const recoveryStatements = (sql: SqlClient.SqlClient) => {
  const recoverDeliveries = SqlSchema.findOne({
    Request: RecoverRequest,
    Result: Recovered,
    execute: (request) =>
      sql`WITH picked AS (
            SELECT d.id, row_number() OVER (ORDER BY d.created_at, d.id) - 1 AS position
              FROM webhook_deliveries d JOIN webhooks w ON w.account_id = d.account_id AND w.enabled
             WHERE d.account_id = ${request.accountId} AND d.status = 'failed' AND d.created_at >= ${request.since}
               AND d.claim_token IS NULL
          ), queued AS (
            UPDATE webhook_deliveries d
               SET status = 'pending', completed_at = NULL,
                   next_attempt_at = ${request.now}::timestamptz + (picked.position * ${request.paceMs}::float8) * interval '1 millisecond'
              FROM picked WHERE d.id = picked.id
            RETURNING d.next_attempt_at
          )
          SELECT count(*)::int AS queued, max(next_attempt_at) AS last_attempt_at FROM queued`
  })
  return { recoverDeliveries } as const
}
