/**
 * WebhooksRepo in memory, for tests of the webhook services and the dispatcher without a
 * database. Each statement is the PostgreSQL repository's, with the same guards: a delivery is
 * claimed, recorded, dropped or released only under its claim token, a delivered one is never
 * queued again, and the endpoint's health changes as the SQL's recordAttempt changes it. The
 * delivery clock is the caller's `now`, as there. The PostgreSQL repository remains the proof
 * of the SQL (the contract suite in test/memory-repos-jobs.test.ts runs both through the same cases).
 *
 * What differs: where the SQL reads the database's now() (the rotation window, updated_at), this
 * reads Effect's Clock, so a TestClock moves it too; pg_notify is recorded in
 * `state.notifications`, not sent; SKIP LOCKED skips nothing (each statement runs whole on one
 * thread); foreign keys to `accounts` are not checked; the wallet events PostgreSQL's triggers
 * write into the outbox do not exist here.
 *
 * The tables are in TablesMemory.ts, the delivery and attempt statements in DeliveriesMemory.ts;
 * this file holds the webhook's own statements and builds the repository from both.
 */
import { Clock, Effect, Layer, Option } from "effect"
import { claimStatements, deliveryLogStatements, outboxStatements, outcomeStatements, validPreviousSecret } from "./DeliveriesMemory.js"
import { WebhooksRepo } from "./Repo.js"
import { recoveryStatements } from "./RepoRecoveryMemory.js"
import type { WebhookState } from "./Rows.js"
import type { MemoryWebhook, MemoryWebhooksState } from "./TablesMemory.js"

export const emptyWebhooksState = (): MemoryWebhooksState => ({
  webhooks: new Map(),
  deliveries: new Map(),
  attempts: [],
  lastAttemptId: 0,
  notifications: []
})

type Repo = WebhooksRepo["Service"]

const stateOf = (webhook: MemoryWebhook): WebhookState => ({
  url: webhook.url,
  enabled: webhook.enabled,
  events: webhook.events === null ? null : [...webhook.events],
  disabled_reason: webhook.disabledReason,
  disabled_at: webhook.disabledAt
})

const webhookStatements = (state: MemoryWebhooksState) => {
  /** Changes the account's webhook, stamping updated_at; None when it has none. */
  const update = (accountId: string, change: (webhook: MemoryWebhook) => void) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const webhook = state.webhooks.get(accountId)
      if (webhook === undefined) return Option.none()
      change(webhook)
      webhook.updatedAt = new Date(now)
      return Option.some(webhook)
    })

  return {
    findWebhook: (accountId: string) =>
      Effect.map(Clock.currentTimeMillis, (now) =>
        Option.map(Option.fromNullishOr(state.webhooks.get(accountId)), (webhook) => ({
          ...stateOf(webhook),
          secret_ciphertext: webhook.secretCiphertext,
          previous_secret_ciphertext: validPreviousSecret(webhook, now)
        }))),
    /** Creates the account's webhook, enabled; None when it has one already. */
    createWebhook: (request: Parameters<Repo["createWebhook"]>[0]) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (state.webhooks.has(request.accountId)) return Option.none()
        const webhook: MemoryWebhook = {
          accountId: request.accountId,
          url: request.url,
          enabled: true,
          secretCiphertext: request.secretCiphertext,
          previousSecretCiphertext: null,
          previousSecretExpiresAt: null,
          events: request.events === null ? null : [...request.events],
          failingSince: null,
          disabledReason: null,
          disabledAt: null,
          updatedAt: new Date(now)
        }
        state.webhooks.set(request.accountId, webhook)
        return Option.some(stateOf(webhook))
      }),
    /** A new URL enables the webhook and clears a health disable; `events` (when given) replaces the selection. */
    retargetWebhook: (request: Parameters<Repo["retargetWebhook"]>[0]) =>
      Effect.flatMap(
        update(request.accountId, (webhook) => {
          webhook.url = request.url
          webhook.enabled = true
          webhook.failingSince = null
          webhook.disabledReason = null
          webhook.disabledAt = null
          if (request.events !== undefined) webhook.events = request.events === null ? null : [...request.events]
        }),
        // findOne: no row is a defect, as there.
        Option.match({
          onNone: () => Effect.die(new Error(`in-memory webhooks: no webhook for ${request.accountId}`)),
          onSome: (webhook) => Effect.succeed(stateOf(webhook))
        })
      ),
    switchOffWebhook: (accountId: string) =>
      Effect.asVoid(update(accountId, (webhook) => {
        webhook.enabled = false
        webhook.disabledReason = null
        webhook.disabledAt = null
      })),
    /** Plan loss: off; a health disable's reason stays, as the SQL leaves it. */
    disableForPlanLoss: (accountId: string) =>
      Effect.asVoid(update(accountId, (webhook) => {
        webhook.enabled = false
      })),
    rotateSecret: (request: Parameters<Repo["rotateSecret"]>[0]) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.map(
          update(request.accountId, (webhook) => {
            webhook.previousSecretCiphertext = webhook.secretCiphertext
            webhook.previousSecretExpiresAt = new Date(now + request.previousTtlMs)
            webhook.secretCiphertext = request.secretCiphertext
          }),
          Option.map(stateOf)
        ))
  }
}

/** A WebhooksRepo over `seed` (a fresh, empty state when not given): its layer, and the state for a test to seed and read. */
export const makeWebhooksRepoInMemory = (seed?: MemoryWebhooksState) => {
  const state = seed ?? emptyWebhooksState()
  const repo: Repo = {
    ...webhookStatements(state),
    ...outboxStatements(state),
    ...deliveryLogStatements(state),
    ...recoveryStatements(state),
    ...claimStatements(state),
    ...outcomeStatements(state)
  }
  return { layer: Layer.succeed(WebhooksRepo, repo), state }
}
