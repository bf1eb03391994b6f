/**
 * What the webhook repository (Repo.ts, and RepoMemory.ts for tests) offers: the account webhook,
 * the outbox, the delivery log and the dispatcher's transitions. `now` is always the caller's
 * (Effect's Clock), so TestClock drives the retry schedule.
 */
import type { Effect, Option } from "effect"
import type { RecoverRequest, Recovered } from "./RepoRecovery.js"
import type * as Rows from "./Rows.js"

/** A request on one of the account's deliveries. */
interface DeliveryRef {
  readonly accountId: string
  readonly id: string
}

export interface WebhooksRepoService {
  /** The account's webhook with its sealed secrets (the previous one only while its rotation window lasts). */
  readonly findWebhook: (accountId: string) => Effect.Effect<Option.Option<Rows.WebhookRow>>
  /** Creates the account's webhook, enabled; None when it has one already. */
  readonly createWebhook: (
    request: { readonly accountId: string; readonly url: string; readonly secretCiphertext: string; readonly events: typeof Rows.Selection.Type }
  ) => Effect.Effect<Option.Option<Rows.WebhookState>>
  /** A new URL enables the webhook and clears a health disable; `events` (when given) replaces the selection. */
  readonly retargetWebhook: (
    request: { readonly accountId: string; readonly url: string; readonly events: typeof Rows.Selection.Type | undefined }
  ) => Effect.Effect<Rows.WebhookState>
  /** DELETE /v1/webhooks: off, url and secret kept. */
  readonly switchOffWebhook: (accountId: string) => Effect.Effect<void>
  /** Plan loss: off, url and secret kept. */
  readonly disableForPlanLoss: (accountId: string) => Effect.Effect<void>
  /** The new secret becomes current; the current one stays valid for `previousTtlMs`. None: no webhook. */
  readonly rotateSecret: (
    request: { readonly accountId: string; readonly secretCiphertext: string; readonly previousTtlMs: number }
  ) => Effect.Effect<Option.Option<Rows.WebhookState>>

  /**
   * Records an event for the account's webhook when it is enabled and takes this type; joins
   * the caller's transaction. The delivery id; None when nothing was queued.
   */
  readonly enqueueDelivery: (request: typeof Rows.EnqueueRequest.Type) => Effect.Effect<Option.Option<{ readonly id: string }>>
  /** Wakes the dispatchers (sent when the caller's transaction commits). */
  readonly notifyDispatchers: (deliveryId: string) => Effect.Effect<void>
  /** The outbox's backlog at `now`: deliveries pending, and how overdue the most overdue one is (0: none). */
  readonly outboxBacklog: (now: Date) => Effect.Effect<{ readonly pending: number; readonly oldest_due_ms: number }>

  /** A page of the account's deliveries, newest first, after `afterId` when given. */
  readonly listDeliveries: (request: typeof Rows.ListRequest.Type) => Effect.Effect<ReadonlyArray<Rows.DeliveryRow>>
  readonly findDelivery: (request: DeliveryRef) => Effect.Effect<Option.Option<Rows.DeliveryRow>>
  /**
   * A pending or failed delivery becomes due at `now`, when the webhook is enabled and no
   * dispatcher holds it. None: left as it is.
   */
  readonly requeueDelivery: (request: DeliveryRef & { readonly now: Date }) => Effect.Effect<Option.Option<Rows.DeliveryRow>>
  /** Deletes up to `batch` finished deliveries (and their attempts) created `retentionMs` before `now`; how many. */
  readonly sweepFinishedDeliveries: (
    request: { readonly retentionMs: number; readonly batch: number; readonly now: Date }
  ) => Effect.Effect<{ readonly swept: number }>
  /**
   * The account's failed deliveries created since `since` due again, oldest first, one every
   * `paceMs` from `now`; those a dispatcher holds are left to it, nothing while the webhook is disabled.
   */
  readonly recoverDeliveries: (request: typeof RecoverRequest.Type) => Effect.Effect<typeof Recovered.Type>

  /**
   * Claims up to `limit` due deliveries under `token`: counts the attempt and leases each for
   * `leaseMs`, so no other dispatcher takes it meanwhile and no transaction stays open.
   */
  readonly claimDueDeliveries: (
    request: { readonly limit: number; readonly token: string; readonly leaseMs: number; readonly now: Date }
  ) => Effect.Effect<ReadonlyArray<Rows.ClaimedRow>>
  /** Milliseconds from `now` until the next pending delivery is due (null: none pending). */
  readonly untilNextDue: (now: Date) => Effect.Effect<{ readonly wait_ms: number | null }>
  /**
   * An attempt's outcome, in one statement: the attempt row (always), and, under the claim token,
   * the delivery's next state and the endpoint's health (a streak starts, ends, or disables the webhook).
   */
  readonly recordAttempt: (request: Rows.AttemptRecord) => Effect.Effect<void>
  /** The webhook is disabled (or gone): the event is not sent and not retried; the claim's attempt does not count. */
  readonly dropForDisabledWebhook: (request: typeof Rows.ClaimRequest.Type) => Effect.Effect<void>
  /** A clean shutdown hands an unfinished attempt back, due at once (it does not count). */
  readonly releaseClaim: (request: typeof Rows.ClaimRequest.Type) => Effect.Effect<void>
}
