/**
 * The delivery log: an account's webhook deliveries (the outbox rows the dispatcher works
 * through), newest first, a retry that queues one for an attempt now, a recovery that queues the
 * failed ones since a time, and the sweep that drops finished deliveries older than
 * WEBHOOK_DELIVERY_RETENTION.
 *
 * A retry sends the same event: the same event id (so the same `webhook-id`, for receivers that
 * dedupe) and the same body bytes, signed afresh at the attempt.
 */
import { Context, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"
import { Secrets } from "../Config.js"
import { keysetPage, readCursor, signCursor } from "../Cursor.js"
import { type InvalidCursor, NotFound, ValidationFailed } from "../Errors.js"
import { idPattern } from "../Ids.js"
import { tracedFn } from "../Observability/Tracing.js"
import { currentDate } from "../Repository.js"
import { toNullableTimestamp, toTimestamp } from "../Schemas.js"
import { DatabaseMode, logBackgroundFailure } from "../Sql.js"
import type { DeliveryParams, WebhookDelivery, WebhookDeliveryList, WebhookRecovery } from "./Api.js"
import { WebhookConfig } from "./Config.js"
import { WebhooksRepo } from "./Repo.js"
import type { DeliveryRow } from "./Rows.js"

const defaultPageSize = 50
const sweepBatch = 1_000

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

/**
 * Queues every failed delivery of the account created since `since` again, oldest first, one
 * every WEBHOOK_RECOVER_PACE (one statement); `since` is within the retention and not ahead.
 */
const recoverSince = (repo: WebhooksRepo["Service"], mode: DatabaseMode["Service"], config: WebhookConfig) => {
  const retentionMs = Duration.toMillis(config.deliveryRetention)
  return tracedFn("WebhookDeliveries.recover", Effect.fnUntraced(function*(accountId: string, since: Date) {
    const now = yield* currentDate
    if (since.getTime() < now.getTime() - retentionMs) {
      return yield* new ValidationFailed({
        message: `since: must be within the delivery retention (${Duration.format(config.deliveryRetention)}): deliveries before ` +
          `${new Date(now.getTime() - retentionMs).toISOString()} are no longer kept.`
      })
    }
    if (since.getTime() > now.getTime()) return yield* new ValidationFailed({ message: "since: must not be in the future." })
    const webhook = yield* repo.findWebhook(accountId)
    if (Option.isNone(webhook) || !webhook.value.enabled) {
      return yield* new ValidationFailed({
        message: "The webhook is not enabled; enable it with PUT /v1/webhooks, then recover its deliveries."
      })
    }
    const recovered = yield* repo.recoverDeliveries({ accountId, since, now, paceMs: Duration.toMillis(config.recoverPace) })
    if (recovered.queued > 0 && !mode.embedded) yield* repo.notifyDispatchers("recover")
    return {
      object: "webhook_recovery",
      since: toTimestamp(since),
      queued: recovered.queued,
      last_attempt_at: toNullableTimestamp(recovered.last_attempt_at)
    } satisfies WebhookRecovery
  }))
}

/** An account's webhook deliveries as the API shows them, and the retention sweep. */
export interface WebhookDeliveriesService {
  /** A page of the account's deliveries, newest first, by status when asked. */
  readonly list: (accountId: string, params: DeliveryParams) => Effect.Effect<WebhookDeliveryList, InvalidCursor>
  readonly get: (accountId: string, id: string) => Effect.Effect<WebhookDelivery, NotFound>
  /** Sends a failed or pending delivery again now; a delivered one, or one to a disabled webhook, is refused. */
  readonly retry: (accountId: string, id: string) => Effect.Effect<WebhookDelivery, NotFound | ValidationFailed>
  /** Queues again the deliveries that failed since `since` (within the retention). */
  readonly recover: (accountId: string, since: Date) => Effect.Effect<WebhookRecovery, ValidationFailed>
  /** Deletes finished deliveries past the retention, in batches; how many. */
  readonly sweep: Effect.Effect<number>
}

const make = Effect.gen(function*() {
  const repo = yield* WebhooksRepo
  const mode = yield* DatabaseMode
  const config = yield* WebhookConfig
  const { cursorSecret } = yield* Secrets
  const notFound = (id: string) => new NotFound({ message: `No webhook delivery ${id} on this account.` })

  const list = tracedFn("WebhookDeliveries.list", Effect.fnUntraced(function*(accountId: string, params: DeliveryParams) {
    const limit = params.limit ?? defaultPageSize
    const binding = ["webhooks.deliveries", accountId, params.status ?? ""].join("|")
    const after = yield* readCursor(cursorSecret, binding, params.cursor, Position)
    const rows = yield* repo.listDeliveries({
      accountId,
      status: params.status,
      afterId: Option.getOrUndefined(Option.map(after, (position) => position.id)),
      limit: limit + 1
    })
    return keysetPage(rows, limit, toDelivery, (last) => signCursor(cursorSecret, binding, { id: last.id })) satisfies
      WebhookDeliveryList
  }))

  const findRow = (accountId: string, id: string) =>
    Effect.flatMap(repo.findDelivery({ accountId, id }), Option.match({
      onNone: () => Effect.fail(notFound(id)),
      onSome: Effect.succeed
    }))

  /** One delivery of the account; 404 for another account's or an unknown (or malformed) id. */
  const get = tracedFn("WebhookDeliveries.get", (accountId: string, id: string) =>
    deliveryPattern.test(id) ? Effect.map(findRow(accountId, id), toDelivery) : Effect.fail(notFound(id))
  )

  /**
   * Queues a pending or failed delivery for an attempt now. One guarded statement: a delivery
   * being attempted right now (claimed) is left to that attempt and answered as it is.
   */
  const retry = tracedFn("WebhookDeliveries.retry", Effect.fnUntraced(function*(accountId: string, id: string) {
    if (!deliveryPattern.test(id)) return yield* notFound(id)
    const now = yield* currentDate
    const queued = yield* repo.requeueDelivery({ accountId, id, now })
    if (Option.isSome(queued)) {
      if (!mode.embedded) yield* repo.notifyDispatchers(id)
      return toDelivery(queued.value)
    }
    const current = yield* findRow(accountId, id)
    if (current.status === "delivered") {
      return yield* new ValidationFailed({ message: `Webhook delivery ${id} was delivered already; it is not sent again.` })
    }
    const webhook = yield* repo.findWebhook(accountId)
    if (Option.isNone(webhook) || !webhook.value.enabled) {
      return yield* new ValidationFailed({
        message: "The webhook is disabled; enable it with PUT /v1/webhooks, then retry the delivery."
      })
    }
    return toDelivery(current)
  }))

  const retentionMs = Duration.toMillis(config.deliveryRetention)

  const recover = recoverSince(repo, mode, config)

  /** Deletes finished deliveries (and their attempts) past the retention, in batches; returns how many. */
  const sweep = Effect.gen(function*() {
    let total = 0
    for (;;) {
      const now = yield* currentDate
      const { swept } = yield* repo.sweepFinishedDeliveries({ retentionMs, batch: sweepBatch, now })
      total += swept
      if (swept < sweepBatch) return total
    }
  })

  return WebhookDeliveries.of({ list, get, retry, recover, sweep })
})

export class WebhookDeliveries extends Context.Service<WebhookDeliveries, WebhookDeliveriesService>()(
  "hookline/WebhookDeliveries"
) {
  static readonly layer = Layer.effect(WebhookDeliveries, make).pipe(Layer.provide([Secrets.layer, WebhooksRepo.layer]))
}

/** The retention sweep, in the back yard; safe in several processes (each batch is one statement). */
export const DeliverySweeperLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const deliveries = yield* WebhookDeliveries
    const { sweepInterval } = yield* WebhookConfig
    yield* deliveries.sweep.pipe(
      Effect.tap((swept) => (swept > 0 ? Effect.logInfo("swept webhook deliveries").pipe(Effect.annotateLogs({ swept })) : Effect.void)),
      Effect.catchCause(logBackgroundFailure("webhook delivery sweep failed")),
      Effect.withSpan("WebhookDeliveries.sweep"),
      Effect.repeat(Schedule.spaced(sweepInterval)),
      Effect.forkScoped
    )
  })
)
