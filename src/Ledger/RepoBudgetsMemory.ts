/**
 * Key budgets in the memory LedgerRepo (RepoMemory.ts): the spend columns of `api_keys` as a map
 * by key id, counted by the same rules as the SQL (RepoSql.ts, RepoBudgets.ts).
 */
import { Clock, Effect, Option } from "effect"

export interface MemoryBudget {
  readonly accountId: string
  limit: number | null
  spent: number
  /** Epoch milliseconds: the end of the period `spent` counts in; null: never spent. */
  periodEnd: number | null
  /** The period whose key.spend_limit_reached was sent. */
  reachedPeriodEnd: number | null
}

export interface MemoryBudgetsState {
  budgets: Map<string, MemoryBudget>
  /** key.spend_limit_reached events sent (webhook deliveries, in the database). */
  limitEvents: Array<{ readonly keyId: string; readonly periodEnd: number }>
}

/** hookline_key_period_end: the wallet's period end, or the end of the calendar month (UTC) without one. */
export const keyPeriodEnd = (walletPeriodEnd: number | null, now: number) => {
  if (walletPeriodEnd !== null) return walletPeriodEnd
  const date = new Date(now)
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1)
}

/**
 * The budgets of the keys `keys` names (the KeysRepo memory's keys: a key id → its account), as
 * the SQL's api_keys rows: a key not there has none, and a debit naming it counts nothing.
 * `walletPeriodEnd` reads an account's wallet period end (undefined: no wallet).
 */
export const budgetsOf = (
  state: MemoryBudgetsState,
  keys: ReadonlyMap<string, { readonly accountId: string }>,
  walletPeriodEnd: (accountId: string) => number | null | undefined
) => {
  const find = (keyId: string): MemoryBudget | undefined => {
    const known = state.budgets.get(keyId)
    if (known !== undefined) return known
    const owner = keys.get(keyId)?.accountId
    if (owner === undefined) return undefined
    const opened: MemoryBudget = { accountId: owner, limit: null, spent: 0, periodEnd: null, reachedPeriodEnd: null }
    state.budgets.set(keyId, opened)
    return opened
  }

  /** The key's budget before a debit: its limit, what it spent in `periodEnd`'s period, and whether `amount` passes it. */
  const check = (keyId: string | null, periodEnd: number, amount: number) => {
    const budget = keyId === null ? undefined : find(keyId)
    if (budget === undefined) return null
    const spent = budget.periodEnd === periodEnd ? budget.spent : 0
    return { budget, spent, periodEnd, overLimit: budget.limit !== null && spent + amount > budget.limit }
  }

  /** A hold's release gives `amount` back to its key, in the hold's period only. */
  const giveBack = (keyId: string | null, periodEnd: number | null, amount: number) => {
    const budget = keyId === null ? undefined : state.budgets.get(keyId)
    if (budget !== undefined && budget.periodEnd === periodEnd && amount > 0) budget.spent -= amount
  }

  const statements = {
    setSpendLimit: ({ keyId, spendLimit }: { readonly keyId: string; readonly spendLimit: number | null }) =>
      Effect.sync(() => {
        const budget = find(keyId)
        if (budget === undefined) return Option.none()
        // `CHECK (spend_limit >= 0)`: a violation is a defect, as at the SQL boundary.
        if (spendLimit !== null && spendLimit < 0) throw new Error(`spend_limit must be >= 0, got ${spendLimit}`)
        budget.limit = spendLimit
        return Option.some({ id: keyId })
      }),
    findKeyBudget: (keyId: string) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const budget = find(keyId)
        const walletEnd = budget === undefined ? undefined : walletPeriodEnd(budget.accountId)
        if (budget === undefined || walletEnd === undefined) return Option.none()
        const periodEnd = keyPeriodEnd(walletEnd, now)
        return Option.some({
          key_id: keyId,
          account_id: budget.accountId,
          spend_limit: budget.limit,
          period_spent: budget.periodEnd === periodEnd ? budget.spent : 0,
          period_end: new Date(periodEnd)
        })
      }),
    noteSpendLimitReached: (keyId: string) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const budget = state.budgets.get(keyId)
        const walletEnd = budget === undefined ? undefined : walletPeriodEnd(budget.accountId)
        if (budget === undefined || walletEnd === undefined) return
        const periodEnd = keyPeriodEnd(walletEnd, now)
        if (budget.reachedPeriodEnd === periodEnd) return
        budget.reachedPeriodEnd = periodEnd
        state.limitEvents.push({ keyId, periodEnd })
      })
  }
  return { check, giveBack, statements }
}
