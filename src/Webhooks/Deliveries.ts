/**
 * The delivery log: an account's webhook deliveries (the outbox rows the dispatcher works
 * through), newest first, a retry that queues one for an attempt now, and the sweep that drops
 * finished deliveries older than WEBHOOK_DELIVERY_RETENTION.
 *
 * A retry sends the same event: the same event id (so the same `webhook-id`, for receivers that
 * dedupe) and the same body bytes, signed afresh at the attempt.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Option, Schedule, Schema } from "effect"
import { Secrets } from "../Config.js"
import { keysetPage, readCursor, signCursor } from "../Cursor.js"
import { NotFound, ValidationFailed } from "../Errors.js"
import { idPattern } from "../Ids.js"
import { toNullableTimestamp, toTimestamp } from "../Schemas.js"
import { DatabaseMode, orDieOnDb } from "../Sql.js"
import { type DeliveryParams, DeliveryStatus, EventType, type WebhookDelivery, type WebhookDeliveryList } from "./Api.js"
import { WebhookConfig } from "./Config.js"
import { deliveriesChannel } from "./Webhooks.js"

const defaultPageSize = 50
const sweepBatch = 1_000

const DeliveryRow = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  event_type: EventType,
  status: DeliveryStatus,
  attempts: Schema.Number,
  last_status_code: Schema.NullOr(Schema.Number),
  last_error: Schema.NullOr(Schema.String),
  next_attempt_at: Schema.DateFromSelf,
  created_at: Schema.DateFromSelf,
  completed_at: Schema.NullOr(Schema.DateFromSelf)
})
type DeliveryRow = typeof DeliveryRow.Type
const decodeRows = Schema.decodeUnknown(Schema.Array(DeliveryRow))

const toDelivery = (row: DeliveryRow): WebhookDelivery => ({
  object: "webhook_delivery",
  id: row.id,
  event_id: row.event_id,
  event_type: row.event_type,
  status: row.status,
  attempts: row.attempts,
  last_status_code: row.last_status_code,
  last_error: row.last_error,
  next_attempt_at: row.status === "pending" ? toTimestamp(row.next_attempt_at) : null,
  created_at: toTimestamp(row.created_at),
  completed_at: toNullableTimestamp(row.completed_at)
})

/** Where the previous page ended: the last delivery's id (ids are time-ordered). */
const Position = Schema.Struct({ id: Schema.String })

const deliveryPattern = idPattern("dlv")

export class WebhookDeliveries extends Effect.Service<WebhookDeliveries>()("hookline/WebhookDeliveries", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const mode = yield* DatabaseMode
    const config = yield* WebhookConfig
    const { cursorSecret } = yield* Secrets
    const columns = sql`d.id, d.event_id, d.event_type, d.status, d.attempts, d.last_status_code, d.last_error,
                        d.next_attempt_at, d.created_at, d.completed_at`
    const notFound = (id: string) => new NotFound({ message: `No webhook delivery ${id} on this account.` })

    const list = (accountId: string, params: DeliveryParams) =>
      Effect.gen(function*() {
        const limit = params.limit ?? defaultPageSize
        const binding = ["webhooks.deliveries", accountId, params.status ?? ""].join("|")
        const after = yield* readCursor(cursorSecret, binding, params.cursor, Position)
        const rows = yield* sql`
          SELECT ${columns} FROM webhook_deliveries d
           WHERE d.account_id = ${accountId}
             ${params.status === undefined ? sql`` : sql`AND d.status = ${params.status}`}
             ${Option.match(after, { onNone: () => sql``, onSome: (position) => sql`AND d.id < ${position.id}` })}
           ORDER BY d.id DESC
           LIMIT ${limit + 1}`.pipe(Effect.flatMap(decodeRows))
        return keysetPage(rows, limit, toDelivery, (last) => signCursor(cursorSecret, binding, { id: last.id })) satisfies
          WebhookDeliveryList
      }).pipe(orDieOnDb, Effect.withSpan("WebhookDeliveries.list"))

    const findRow = (accountId: string, id: string) =>
      sql`SELECT ${columns} FROM webhook_deliveries d WHERE d.id = ${id} AND d.account_id = ${accountId}`.pipe(
        Effect.flatMap(decodeRows),
        orDieOnDb,
        Effect.flatMap((rows) => (rows.length === 0 ? Effect.fail(notFound(id)) : Effect.succeed(rows[0])))
      )

    /** One delivery of the account; 404 for another account's or an unknown (or malformed) id. */
    const get = (accountId: string, id: string) =>
      deliveryPattern.test(id) ? Effect.map(findRow(accountId, id), toDelivery) : Effect.fail(notFound(id))

    /**
     * Queues a pending or failed delivery for an attempt now. One guarded statement: a delivery
     * being attempted right now (claimed) is left to that attempt and answered as it is.
     */
    const retry = (accountId: string, id: string) =>
      Effect.gen(function*() {
        if (!deliveryPattern.test(id)) return yield* notFound(id)
        const queued = yield* sql`
          UPDATE webhook_deliveries d
             SET status = 'pending', next_attempt_at = now(), completed_at = NULL
            FROM webhooks w
           WHERE d.id = ${id} AND d.account_id = ${accountId} AND d.status <> 'delivered' AND d.claim_token IS NULL
             AND w.account_id = d.account_id AND w.enabled
          RETURNING ${columns}`.pipe(Effect.flatMap(decodeRows), orDieOnDb)
        if (queued.length > 0) {
          if (!mode.embedded) yield* sql`SELECT pg_notify(${deliveriesChannel}, ${id})`.pipe(orDieOnDb)
          return toDelivery(queued[0])
        }
        const current = yield* findRow(accountId, id)
        if (current.status === "delivered") {
          return yield* new ValidationFailed({ message: `Webhook delivery ${id} was delivered already; it is not sent again.` })
        }
        const enabled = yield* sql<{ enabled: boolean }>`SELECT enabled FROM webhooks WHERE account_id = ${accountId}`.pipe(
          orDieOnDb
        )
        if (enabled[0]?.enabled !== true) {
          return yield* new ValidationFailed({
            message: "The webhook is disabled; enable it with PUT /v1/webhooks, then retry the delivery."
          })
        }
        return toDelivery(current)
      }).pipe(Effect.withSpan("WebhookDeliveries.retry"))

    const retentionMs = Duration.toMillis(config.deliveryRetention)

    /** Deletes finished deliveries (and their attempts) past the retention, in batches; returns how many. */
    const sweep = Effect.gen(function*() {
      let total = 0
      for (;;) {
        const rows = yield* sql<{ swept: number }>`
          WITH gone AS (
            DELETE FROM webhook_deliveries WHERE id IN (
              SELECT id FROM webhook_deliveries
               WHERE created_at < now() - ${retentionMs}::float8 * interval '1 millisecond' AND status <> 'pending'
               ORDER BY created_at LIMIT ${sweepBatch})
            RETURNING 1
          )
          SELECT count(*)::int AS swept FROM gone`
        const swept = rows[0]?.swept ?? 0
        total += swept
        if (swept < sweepBatch) return total
      }
    }).pipe(orDieOnDb)

    return { list, get, retry, sweep, config } as const
  }),
  dependencies: [Secrets.Live]
}) {}

/** The retention sweep, in the back yard; safe in several processes (each batch is one statement). */
export const DeliverySweeperLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const deliveries = yield* WebhookDeliveries
    yield* deliveries.sweep.pipe(
      Effect.tap((swept) => (swept > 0 ? Effect.logInfo("swept webhook deliveries").pipe(Effect.annotateLogs({ swept })) : Effect.void)),
      Effect.catchAllCause((cause) => Effect.logError("webhook delivery sweep failed", cause)),
      Effect.withSpan("WebhookDeliveries.sweep"),
      Effect.repeat(Schedule.spaced(deliveries.config.sweepInterval)),
      Effect.forkScoped
    )
  })
)
