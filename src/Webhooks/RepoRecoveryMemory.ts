/** RepoRecovery.ts in memory: the same failed deliveries made due again, oldest first, at the same pace. */
import { Effect } from "effect"
import type { WebhooksRepo } from "./Repo.js"
import type { MemoryWebhooksState } from "./TablesMemory.js"

type Repo = WebhooksRepo["Service"]

export const recoveryStatements = (state: MemoryWebhooksState) => ({
  recoverDeliveries: ({ accountId, since, now, paceMs }: Parameters<Repo["recoverDeliveries"]>[0]) =>
    Effect.sync(() => {
      if (state.webhooks.get(accountId)?.enabled !== true) return { queued: 0, last_attempt_at: null }
      const picked = [...state.deliveries.values()]
        .filter((delivery) =>
          delivery.accountId === accountId && delivery.status === "failed" && delivery.claimToken === null &&
          delivery.createdAt.getTime() >= since.getTime()
        )
        .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      picked.forEach((delivery, position) => {
        delivery.status = "pending"
        delivery.completedAt = null
        delivery.nextAttemptAt = new Date(now.getTime() + position * paceMs)
      })
      return { queued: picked.length, last_attempt_at: picked.length === 0 ? null : picked[picked.length - 1].nextAttemptAt }
    })
})
