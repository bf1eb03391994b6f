/**
 * Top-up grants in the memory LedgerRepo (RepoMemory.ts): the `topup_grants` rows as a map, with
 * the same rules as the SQL (RepoGrants.ts, RepoSql.ts, migration 0013's hookline_take_topup):
 * spent soonest-expiring first, never-expiring last, then oldest; a release goes back to the
 * grants taken last first, and what belongs to an expired grant expires with it; a due grant's
 * remaining credits leave through an `expire` row.
 */
import { Clock, Effect, Option } from "effect"
import { newId } from "../Ids.js"
import { type Bucket, maxBalance } from "./Domain.js"
import type { LedgerRepo } from "./Repo.js"

export interface MemoryGrant {
  readonly id: string
  readonly accountId: string
  readonly amount: number
  remaining: number
  /** Epoch milliseconds; null: never expires. */
  readonly expiresAt: number | null
  expiredAt: number | null
  readonly createdAt: number
}

/** What a hold took from each grant, in the order taken. */
export type GrantTakes = ReadonlyArray<readonly [grantId: string, credits: number]>

/** The wallet fields and journal writer the grants need from RepoMemory.ts. */
export interface GrantsWallets {
  readonly get: (accountId: string) => { monthly: number; topup: number } | undefined
  readonly journal: (row: {
    readonly accountId: string
    readonly entryType: "grant" | "expire"
    readonly bucket: Bucket
    readonly amount: number
    readonly monthlyAfter: number
    readonly topupAfter: number
    readonly operation: string
    readonly referenceId: string | null
    readonly reason: string | null
    readonly grantId: string | null
  }) => void
  /** The journal's grant rows (for a reference's earlier grant). */
  readonly grantRows: () => ReadonlyArray<{
    readonly accountId: string
    readonly entryType: string
    readonly operation: string
    readonly referenceId: string | null
    readonly bucket: Bucket
    readonly amount: number
    readonly grantId: string | null
  }>
}

type Repo = LedgerRepo["Service"]

/** Credits one bucket, at most once per reference; nothing when a balance would pass maxBalance. */
const grantStatements = (
  open: (accountId: string, amount: number, expiresAt: Date | null, now: number) => string,
  wallets: GrantsWallets,
  grantsMap: () => Map<string, MemoryGrant>
) => {
  const earlierGrant = (accountId: string, referenceId: string) =>
    wallets.grantRows().find((row) =>
      row.accountId === accountId && row.referenceId === referenceId && row.entryType === "grant" && row.operation === "admin"
    )
  return {
    grant: (input: Parameters<Repo["grant"]>[0]) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const wallet = wallets.get(input.accountId)
        if (wallet === undefined) return { found: 0, granted: 0, overflow: 0 }
        const toMonthly = input.bucket === "monthly" ? input.amount : 0
        const toTopup = input.bucket === "topup" ? input.amount : 0
        if (wallet.monthly + toMonthly > maxBalance || wallet.topup + toTopup > maxBalance) return { found: 1, granted: 0, overflow: 1 }
        if (input.referenceId !== null && earlierGrant(input.accountId, input.referenceId) !== undefined) {
          return { found: 1, granted: 0, overflow: 0 }
        }
        const grantId = input.bucket === "topup" ? open(input.accountId, input.amount, input.expiresAt ?? null, now) : null
        wallet.monthly += toMonthly
        wallet.topup += toTopup
        wallets.journal({
          accountId: input.accountId, entryType: "grant", bucket: input.bucket, amount: input.amount, monthlyAfter: wallet.monthly,
          topupAfter: wallet.topup, operation: "admin", referenceId: input.referenceId, reason: input.reason, grantId
        })
        return { found: 1, granted: 1, overflow: 0 }
      }),
    findGrantByReference: ({ accountId, referenceId }: { readonly accountId: string; readonly referenceId: string }) =>
      Effect.sync(() =>
        Option.map(Option.fromNullishOr(earlierGrant(accountId, referenceId)), (row) => {
          const expiresAt = row.grantId === null ? null : grantsMap().get(row.grantId)?.expiresAt ?? null
          return { bucket: row.bucket, amount: row.amount, expires_at: expiresAt === null ? null : new Date(expiresAt) }
        })
      )
  }
}

/** Spending order: soonest expiry first, never-expiring last, then oldest, then id. */
const spendingOrder = (a: MemoryGrant, b: MemoryGrant) =>
  (a.expiresAt ?? Infinity) - (b.expiresAt ?? Infinity) || a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** The grants' rows: spending from them, giving back to them, opening one. */
const grantRows = (grantsMap: () => Map<string, MemoryGrant>) => {
  const unexpired = (accountId: string) =>
    [...grantsMap().values()].filter((grant) => grant.accountId === accountId && grant.expiredAt === null).sort(spendingOrder)

  /** The soonest expiry among the account's unexpired grants (wallets.next_grant_expiry). */
  const nextExpiry = (accountId: string): number | null =>
    unexpired(accountId).reduce<number | null>(
      (soonest, grant) => grant.expiresAt === null || (soonest !== null && soonest <= grant.expiresAt) ? soonest : grant.expiresAt,
      null
    )

  /** Takes `wanted` credits from the live grants in spending order (hookline_take_topup). */
  const take = (accountId: string, wanted: number, now: number): GrantTakes => {
    const takes: Array<readonly [string, number]> = []
    let left = wanted
    for (const grant of unexpired(accountId)) {
      if (left === 0) break
      if (grant.remaining === 0 || (grant.expiresAt !== null && grant.expiresAt <= now)) continue
      const n = Math.min(grant.remaining, left)
      grant.remaining -= n
      left -= n
      takes.push([grant.id, n])
    }
    if (left > 0) throw new Error(`top-up grants of ${accountId} hold ${wanted - left} of the ${wanted} credits taken from the wallet`)
    return takes
  }

  /** Gives `back` credits to the grants taken last first; answers what went back to live ones (the rest expires). */
  const giveBack = (takes: GrantTakes, back: number, now: number) => {
    let left = back
    let kept = 0
    for (const [grantId, credits] of [...takes].reverse()) {
      const n = Math.min(credits, left)
      left -= n
      const grant = grantsMap().get(grantId)
      if (n > 0 && grant !== undefined && grant.expiredAt === null && (grant.expiresAt === null || grant.expiresAt > now)) {
        grant.remaining += n
        kept += n
      }
    }
    return kept
  }

  /** Records a top-up grant's row (the grant statement journals it). */
  const open = (accountId: string, amount: number, expiresAt: Date | null, now: number) => {
    const id = newId("grant")
    grantsMap().set(id, { id, accountId, amount, remaining: amount, expiresAt: expiresAt?.getTime() ?? null, expiredAt: null, createdAt: now })
    return id
  }

  return { unexpired, nextExpiry, take, giveBack, open }
}

/** The expiry of due grants and the live grants' list, over `grantsOf`'s rows. */
const expiryStatements = (grantsMap: () => Map<string, MemoryGrant>, wallets: GrantsWallets, rows: ReturnType<typeof grantRows>) => {
  const { unexpired } = rows
  const expireGrants = (accountId: string) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const wallet = wallets.get(accountId)
      if (wallet === undefined) return 0
      const due = unexpired(accountId).filter((grant) => grant.expiresAt !== null && grant.expiresAt <= now)
      for (const grant of due) {
        const left = grant.remaining
        grant.remaining = 0
        grant.expiredAt = now
        if (left === 0) continue
        wallet.topup -= left
        wallets.journal({
          accountId, entryType: "expire", bucket: "topup", amount: -left, monthlyAfter: wallet.monthly, topupAfter: wallet.topup,
          operation: "admin", referenceId: grant.id, reason: "top-up grant expired", grantId: grant.id
        })
      }
      return due.length
    })

  return {
    expireGrants,
    accountsWithGrantsDue: (limit: number) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const due = new Map<string, number>()
        for (const grant of grantsMap().values()) {
          if (grant.expiredAt !== null || grant.expiresAt === null || grant.expiresAt > now) continue
          due.set(grant.accountId, Math.min(due.get(grant.accountId) ?? Infinity, grant.expiresAt))
        }
        return [...due].sort((a, b) => a[1] - b[1]).slice(0, limit).map(([accountId]) => accountId)
      }),
    liveGrants: (accountId: string, limit: number) =>
      Effect.sync(() =>
        unexpired(accountId).filter((grant) => grant.remaining > 0).slice(0, limit).map((grant) => ({
          id: grant.id,
          amount: grant.amount,
          remaining: grant.remaining,
          expires_at: grant.expiresAt === null ? null : new Date(grant.expiresAt),
          created_at: new Date(grant.createdAt)
        }))
      ),
  }
}

/** `grantsMap` is read at each call (a failed memory transaction puts back another map). */
export const grantsOf = (grantsMap: () => Map<string, MemoryGrant>, wallets: GrantsWallets) => {
  const rows = grantRows(grantsMap)
  const statements = { ...expiryStatements(grantsMap, wallets, rows), ...grantStatements(rows.open, wallets, grantsMap) }
  return { nextExpiry: rows.nextExpiry, take: rows.take, giveBack: rows.giveBack, statements }
}
