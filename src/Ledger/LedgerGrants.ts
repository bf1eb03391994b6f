/**
 * The Ledger's grants: admin and billing grants (a top-up grant may carry an expiry), a new
 * account's opening balances, the expiry of top-up grants that are due, and the live grants'
 * list. Part of the Ledger service (Ledger.ts), over the same LedgerRepo.
 */
import { Effect, Option } from "effect"
import { ValidationFailed } from "../Errors.js"
import { tracedFn } from "../Observability/Tracing.js"
import { currentDate } from "../Repository.js"
import { type Bucket, type GrantDetails, maxBalance, type TopupGrant, type WalletState } from "./Domain.js"
import type { LedgerRepo } from "./Repo.js"

const noWallet = (accountId: string) => Effect.die(new Error(`No wallet for account ${accountId}`))

/** How many wallets' due grants one sweep expires at most. */
const expiryBatch = 500

const sameExpiry = (a: Date | null, b: Date | null) => (a === null ? null : a.getTime()) === (b === null ? null : b.getTime())

const creditOperations = (repo: LedgerRepo["Service"], wallet: (accountId: string) => Effect.Effect<WalletState>) => {
  /** Refuses an expiry on a monthly grant, or one not in the future. */
  const checkExpiry = (bucket: Bucket, expiresAt: Date | null) =>
    Effect.gen(function*() {
      if (expiresAt === null) return
      if (bucket !== "topup") return yield* new ValidationFailed({ message: "expires_at: only a top-up grant can expire." })
      if (expiresAt <= (yield* currentDate)) return yield* new ValidationFailed({ message: "expires_at: must be in the future." })
    })

  /**
   * Adds credits to one bucket (an admin or billing grant), journaled, and answers the wallet.
   * A top-up grant may carry `expiresAt` (in the future): what is left of it then expires. A
   * `referenceId` (the billing system's id) credits at most once per account: of concurrent
   * grants with one reference exactly one credits. A repeat with the same bucket, amount and
   * expiry credits nothing and answers the wallet; with another it fails with ValidationFailed,
   * as does a grant that would take a balance past maxBalance.
   */
  const grant = tracedFn("Ledger.grant", Effect.fnUntraced(function*(accountId: string, bucket: Bucket, amount: number, details: GrantDetails) {
    yield* Effect.annotateCurrentSpan({ accountId, bucket, amount })
    const expiresAt = details.expiresAt ?? null
    yield* checkExpiry(bucket, expiresAt)
    // A period that ended is rolled over first, so a monthly grant lands in the new period.
    yield* repo.rollOver(accountId)
    const referenceId = details.referenceId ?? null
    const result = yield* repo.grant({
      accountId,
      bucket,
      amount,
      expiresAt,
      reason: details.reason ?? null,
      referenceId,
      requestId: details.requestId ?? null
    })
    if (result.found === 0) return yield* noWallet(accountId)
    if (result.overflow > 0) {
      return yield* new ValidationFailed({ message: `amount: the ${bucket} balance would pass ${maxBalance} credits, the most a balance holds.` })
    }
    if (result.granted === 0 && referenceId !== null) {
      const earlier = yield* repo.findGrantByReference({ accountId, referenceId })
      if (
        Option.isSome(earlier) &&
        (earlier.value.bucket !== bucket || earlier.value.amount !== amount || !sameExpiry(earlier.value.expires_at, expiresAt))
      ) {
        return yield* new ValidationFailed({
          message: `reference: ${JSON.stringify(referenceId)} already granted ${earlier.value.amount} ${earlier.value.bucket} credits to this account; ` +
            "a grant with the same reference must have the same bucket, amount and expires_at."
        })
      }
    }
    return yield* wallet(accountId)
  }))

  /**
   * Opens the wallet of a new account with its starting balances, journaled as grants.
   * The monthly period starts now when the account has a monthly grant.
   */
  const openWallet = tracedFn("Ledger.openWallet", Effect.fnUntraced(function*(accountId: string, opening: {
    readonly monthlyGrant: number
    readonly monthlyBalance: number
    readonly topupBalance: number
  }) {
    yield* repo.withTransaction(Effect.gen(function*() {
      yield* repo.openWallet({ accountId, monthlyGrant: opening.monthlyGrant })
      const reason = { reason: "opening balance" }
      if (opening.monthlyBalance > 0) yield* grant(accountId, "monthly", opening.monthlyBalance, reason)
      if (opening.topupBalance > 0) yield* grant(accountId, "topup", opening.topupBalance, reason)
    })).pipe(Effect.catchTag("SqlError", Effect.die))
  }))

  return { grant, openWallet }
}

/** The expiry of due top-up grants, and the live grants' list. */
const expiryOperations = (repo: LedgerRepo["Service"], wallet: (accountId: string) => Effect.Effect<WalletState>) => {
  /** Expires the top-up grants that are due, for every wallet with one (a batch per sweep); answers how many expired. */
  const expireDueGrants = Effect.gen(function*() {
    let expired = 0
    for (const accountId of yield* repo.accountsWithGrantsDue(expiryBatch)) expired += yield* repo.expireGrants(accountId)
    if (expired > 0) yield* Effect.logInfo("expired top-up grants").pipe(Effect.annotateLogs({ expired }))
    return expired
  }).pipe(Effect.withSpan("Ledger.expireDueGrants"))

  /**
   * Up to `limit` live top-up grants of the account (credits left, not expired) in the order they
   * are spent, after any rollover and expiry that is due; `more`: there are others after them.
   */
  const topupGrants = tracedFn("Ledger.topupGrants", Effect.fnUntraced(function*(accountId: string, limit: number) {
    yield* wallet(accountId)
    const rows = yield* repo.liveGrants(accountId, limit + 1)
    const grants = rows.slice(0, limit).map((row): TopupGrant => ({
      id: row.id,
      amount: row.amount,
      remaining: row.remaining,
      expiresAt: row.expires_at,
      createdAt: row.created_at
    }))
    return { grants, more: rows.length > limit }
  }))

  return { expireDueGrants, topupGrants }
}

export const grantOperations = (repo: LedgerRepo["Service"], wallet: (accountId: string) => Effect.Effect<WalletState>) => ({
  ...creditOperations(repo, wallet),
  ...expiryOperations(repo, wallet)
})
