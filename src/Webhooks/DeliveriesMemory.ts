/**
 * WebhooksRepo in memory, its delivery statements: the outbox, the delivery log, and the
 * dispatcher's claims and attempts (with the endpoint health an attempt changes). RepoMemory.ts
 * states their guards and builds the repository from them.
 */
import { Clock, Effect, Option } from "effect"
import { deliveriesChannel, type WebhooksRepo } from "./Repo.js"
import type { MemoryDelivery, MemoryWebhook, MemoryWebhooksState } from "./TablesMemory.js"
import type { ClaimedRow, DeliveryRow } from "./Rows.js"

type Repo = WebhooksRepo["Service"]

const plus = (date: Date, ms: number) => new Date(date.getTime() + ms)

/** `column <= bound`, false for NULL as in SQL. */
const atOrBefore = (value: Date | null, bound: Date) => value !== null && value.getTime() <= bound.getTime()

/** The previous secret while its rotation window lasts (by the Clock: the SQL's now()); findWebhook reads it too. */
export const validPreviousSecret = (webhook: MemoryWebhook, now: number) =>
  webhook.previousSecretExpiresAt !== null && webhook.previousSecretExpiresAt.getTime() > now ? webhook.previousSecretCiphertext : null

const deliveryRow = (delivery: MemoryDelivery): DeliveryRow => ({
  id: delivery.id,
  event_id: delivery.eventId,
  event_type: delivery.eventType,
  status: delivery.status,
  attempts: delivery.attempts,
  last_status_code: delivery.lastStatusCode,
  last_error: delivery.lastError,
  next_attempt_at: delivery.nextAttemptAt,
  created_at: delivery.createdAt,
  completed_at: delivery.completedAt
})

export const outboxStatements = (state: MemoryWebhooksState) => ({
  /** Queued only for an enabled webhook that takes this type. */
  enqueueDelivery: (request: Parameters<Repo["enqueueDelivery"]>[0]) =>
    Effect.suspend(() => {
      const webhook = state.webhooks.get(request.accountId)
      if (webhook === undefined || !webhook.enabled || (webhook.events !== null && !webhook.events.includes(request.type))) {
        return Effect.succeedNone
      }
      if (state.deliveries.has(request.deliveryId)) {
        return Effect.die(new Error(`in-memory webhooks: duplicate delivery ${request.deliveryId}`))
      }
      // `payload` is `body::jsonb`: a body that is not JSON is refused there too.
      JSON.parse(request.body)
      state.deliveries.set(request.deliveryId, {
        id: request.deliveryId,
        eventId: request.eventId,
        accountId: request.accountId,
        eventType: request.type,
        body: request.body,
        status: "pending",
        attempts: 0,
        nextAttemptAt: request.now,
        lastStatusCode: null,
        lastError: null,
        createdAt: request.now,
        completedAt: null,
        claimToken: null
      })
      return Effect.succeedSome({ id: request.deliveryId })
    }),
  notifyDispatchers: (deliveryId: string) =>
    Effect.sync(() => void state.notifications.push({ channel: deliveriesChannel, payload: deliveryId })),
  /** Deliveries pending, and how overdue the most overdue one is at `now` (0: none). */
  outboxBacklog: (now: Date) =>
    Effect.sync(() => {
      const pending = [...state.deliveries.values()].filter((delivery) => delivery.status === "pending")
      const due = pending.filter((delivery) => atOrBefore(delivery.nextAttemptAt, now)).map((delivery) => delivery.nextAttemptAt.getTime())
      return { pending: pending.length, oldest_due_ms: due.length === 0 ? 0 : now.getTime() - Math.min(...due) }
    })
})

export const deliveryLogStatements = (state: MemoryWebhooksState) => ({
  /** A page of the account's deliveries, newest (highest id) first, after `afterId` when given. */
  listDeliveries: (request: Parameters<Repo["listDeliveries"]>[0]) =>
    Effect.sync(() =>
      [...state.deliveries.values()]
        .filter((delivery) =>
          delivery.accountId === request.accountId &&
          (request.status === undefined || delivery.status === request.status) &&
          (request.afterId === undefined || delivery.id < request.afterId)
        )
        .sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0))
        .slice(0, request.limit)
        .map(deliveryRow)
    ),
  findDelivery: ({ accountId, id }: Parameters<Repo["findDelivery"]>[0]) =>
    Effect.sync(() => {
      const delivery = state.deliveries.get(id)
      return delivery === undefined || delivery.accountId !== accountId ? Option.none() : Option.some(deliveryRow(delivery))
    }),
  /** Due at `now` again, unless delivered, claimed by a dispatcher, or the webhook is not enabled. */
  requeueDelivery: ({ accountId, id, now }: Parameters<Repo["requeueDelivery"]>[0]) =>
    Effect.sync(() => {
      const delivery = state.deliveries.get(id)
      if (delivery === undefined || delivery.accountId !== accountId || delivery.status === "delivered" || delivery.claimToken !== null) {
        return Option.none()
      }
      if (state.webhooks.get(accountId)?.enabled !== true) return Option.none()
      delivery.status = "pending"
      delivery.nextAttemptAt = now
      delivery.completedAt = null
      return Option.some(deliveryRow(delivery))
    }),
  /** Deletes up to `batch` finished deliveries created before the cutoff (oldest first), and their attempts. */
  sweepFinishedDeliveries: ({ batch, now, retentionMs }: Parameters<Repo["sweepFinishedDeliveries"]>[0]) =>
    Effect.sync(() => {
      const cutoff = now.getTime() - retentionMs
      const gone = [...state.deliveries.values()]
        .filter((delivery) => delivery.createdAt.getTime() < cutoff && delivery.status !== "pending")
        .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime())
        .slice(0, batch)
      const ids = new Set(gone.map((delivery) => delivery.id))
      for (const id of ids) state.deliveries.delete(id)
      state.attempts = state.attempts.filter((attempt) => !ids.has(attempt.deliveryId))
      return { swept: gone.length }
    })
})

/** recordAttempt's endpoint health: a streak starts, ends, or disables the webhook (old values read, as in SQL's SET). */
const recordHealth = (webhook: MemoryWebhook | undefined, request: Parameters<Repo["recordAttempt"]>[0], now: number) => {
  if (webhook === undefined) return
  if (request.delivered) {
    if (webhook.failingSince !== null) webhook.failingSince = null
    return
  }
  const failingTooLong = atOrBefore(webhook.failingSince, plus(request.now, -request.disableAfterMs))
  if (!webhook.enabled || !(webhook.failingSince === null || request.gone || failingTooLong)) return
  const disabledReason = request.gone ? "gone" : failingTooLong ? "failing" : null
  webhook.failingSince = webhook.failingSince ?? request.now
  webhook.enabled = disabledReason === null
  webhook.disabledReason = disabledReason
  webhook.disabledAt = disabledReason === null ? null : request.now
  webhook.updatedAt = new Date(now)
}

/** The dispatcher's claim of due deliveries, and how long until the next is due. */
export const claimStatements = (state: MemoryWebhooksState) => ({
  /** Claims up to `limit` due deliveries (earliest due first): the attempt counted, leased for `leaseMs`. */
  claimDueDeliveries: ({ leaseMs, limit, now, token }: Parameters<Repo["claimDueDeliveries"]>[0]) =>
    Effect.map(Clock.currentTimeMillis, (clock) =>
      [...state.deliveries.values()]
        .filter((delivery) => delivery.status === "pending" && atOrBefore(delivery.nextAttemptAt, now))
        .sort((a, b) => a.nextAttemptAt.getTime() - b.nextAttemptAt.getTime())
        .slice(0, limit)
        .map((delivery): ClaimedRow => {
          delivery.attempts += 1
          delivery.nextAttemptAt = plus(now, leaseMs)
          delivery.claimToken = token
          const webhook = state.webhooks.get(delivery.accountId)
          return {
            id: delivery.id,
            event_id: delivery.eventId,
            account_id: delivery.accountId,
            attempts: delivery.attempts,
            body: delivery.body,
            url: webhook?.url ?? null,
            enabled: webhook?.enabled ?? null,
            secret_ciphertext: webhook?.secretCiphertext ?? null,
            previous_secret_ciphertext: webhook === undefined ? null : validPreviousSecret(webhook, clock)
          }
        })),
  untilNextDue: (now: Date) =>
    Effect.sync(() => {
      const due = [...state.deliveries.values()].filter((delivery) => delivery.status === "pending").map((delivery) => delivery.nextAttemptAt.getTime())
      return { wait_ms: due.length === 0 ? null : Math.min(...due) - now.getTime() }
    })
})

/** What becomes of a claimed delivery: its attempt recorded, or dropped, or handed back. */
export const outcomeStatements = (state: MemoryWebhooksState) => {
  /** The delivery `deliveryId` while `token` still holds it. */
  const claimed = (deliveryId: string, token: string) => {
    const delivery = state.deliveries.get(deliveryId)
    return delivery !== undefined && delivery.claimToken === token ? delivery : undefined
  }

  return {
    /**
     * The attempt row always (it was made); under the claim token only, the delivery's next state
     * and the endpoint's health.
     */
    recordAttempt: (request: Parameters<Repo["recordAttempt"]>[0]) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        if (!state.deliveries.has(request.deliveryId)) {
          return Effect.die(new Error(`in-memory webhooks: attempt of unknown delivery ${request.deliveryId}`))
        }
        state.lastAttemptId += 1
        state.attempts.push({
          id: state.lastAttemptId,
          deliveryId: request.deliveryId,
          attempt: request.attempt,
          dispatcher: request.dispatcher,
          statusCode: request.statusCode,
          durationMs: Math.round(request.durationMs),
          error: request.error,
          attemptedAt: request.now
        })
        const delivery = claimed(request.deliveryId, request.token)
        if (delivery === undefined) return Effect.void
        recordHealth(state.webhooks.get(request.accountId), request, now)
        delivery.status = request.status
        delivery.nextAttemptAt = plus(request.now, request.delayMs)
        delivery.lastStatusCode = request.statusCode
        delivery.lastError = request.error
        delivery.completedAt = request.status === "pending" ? null : request.now
        delivery.claimToken = null
        return Effect.void
      }),
    /** The webhook is disabled: failed, not retried, the claim's attempt not counted. */
    dropForDisabledWebhook: ({ deliveryId, now, token }: Parameters<Repo["dropForDisabledWebhook"]>[0]) =>
      Effect.sync(() => {
        const delivery = claimed(deliveryId, token)
        if (delivery === undefined) return
        delivery.status = "failed"
        delivery.attempts -= 1
        delivery.lastError = "webhook disabled"
        delivery.completedAt = now
        delivery.claimToken = null
      }),
    /** A clean shutdown hands the attempt back, due at once and not counted. */
    releaseClaim: ({ deliveryId, now, token }: Parameters<Repo["releaseClaim"]>[0]) =>
      Effect.sync(() => {
        const delivery = claimed(deliveryId, token)
        if (delivery === undefined) return
        delivery.attempts -= 1
        delivery.nextAttemptAt = now
        delivery.claimToken = null
      })
  }
}
