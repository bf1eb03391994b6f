/**
 * LedgerRepo in memory: the same methods as the PostgreSQL repository, moving the same money by
 * the same rules (RepoSql.ts states them), with time from Effect's Clock. For tests of the
 * Ledger's decisions that need no database; the PostgreSQL tests remain the proof of the SQL.
 *
 * A transaction here is all or nothing too: the state is restored when the effect fails.
 */
import { Clock, Effect, Exit, Layer, Option } from "effect"
import type { Bucket } from "./Domain.js"
import { LedgerRepo } from "./Repo.js"
import { budgetsOf, keyPeriodEnd, type MemoryBudgetsState } from "./RepoBudgetsMemory.js"
import { type GrantTakes, grantsOf, type MemoryGrant } from "./RepoGrantsMemory.js"

export interface MemoryWallet {
  monthly: number
  topup: number
  periodAnchor: number
  /** Epoch milliseconds; null: no monthly grant. */
  periodEnd: number | null
  /** The account's monthly grant (the accounts table's, in the database). */
  monthlyGrant: number
}

export interface MemoryHold {
  readonly id: string
  readonly accountId: string
  readonly monthlyAmount: number
  readonly topupAmount: number
  readonly operation: string
  readonly expiresAt: number | null
  /** The wallet's period end when the hold was opened. */
  readonly periodEnd: number | null
  /** The key it counted against, and that key's period end then. */
  readonly keyId: string | null
  readonly keyPeriodEnd: number | null
  /** The top-up grants it took from, in the order taken. */
  readonly topupGrants: GrantTakes
  status: "pending" | "settled" | "refunded" | "voided"
}

export interface MemoryJournalRow {
  readonly accountId: string
  readonly entryType: "grant" | "reserve" | "release" | "expire"
  readonly bucket: Bucket
  readonly amount: number
  readonly monthlyAfter: number
  readonly topupAfter: number
  readonly holdId: string | null
  readonly operation: string
  readonly referenceId: string | null
  readonly reason: string | null
  readonly keyId: string | null
  /** The top-up grant a grant or expire row is about. */
  readonly grantId: string | null
}

export interface MemoryLedgerState extends MemoryBudgetsState {
  wallets: Map<string, MemoryWallet>
  holds: Map<string, MemoryHold>
  journal: Array<MemoryJournalRow>
  /** Top-up grants by id (`topup_grants`). */
  grants: Map<string, MemoryGrant>
  /** Accounts whose refusal was noted (wallet.depleted, in the database). */
  depleted: Array<string>
}

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month + 1, 0)).getUTCDate()

/** `interval 'n months'` as PostgreSQL adds it: the day of month clamped to the target month's last day. */
export const addMonths = (millis: number, months: number): number => {
  const date = new Date(millis)
  const target = new Date(millis)
  target.setUTCDate(1)
  target.setUTCMonth(date.getUTCMonth() + months)
  target.setUTCDate(Math.min(date.getUTCDate(), daysIn(target.getUTCFullYear(), target.getUTCMonth())))
  return target.getTime()
}

const copyState = (state: MemoryLedgerState): MemoryLedgerState => ({
  wallets: new Map([...state.wallets].map(([id, wallet]) => [id, { ...wallet }])),
  holds: new Map([...state.holds].map(([id, hold]) => [id, { ...hold }])),
  journal: [...state.journal],
  grants: new Map([...state.grants].map(([id, grant]) => [id, { ...grant }])),
  depleted: [...state.depleted],
  budgets: new Map([...state.budgets].map(([id, budget]) => [id, { ...budget }])),
  limitEvents: [...state.limitEvents]
})

type Repo = LedgerRepo["Service"]
type DebitInput = Parameters<Repo["chargeAtOnce"]>[0]

const walletStatements = (state: MemoryLedgerState, nextGrantExpiry: (accountId: string) => number | null) => {
  const journal = (row: Omit<MemoryJournalRow, "holdId" | "referenceId" | "keyId" | "grantId"> & Partial<MemoryJournalRow>) =>
    state.journal.push({ holdId: null, referenceId: null, keyId: null, grantId: null, ...row })

  /** Ends the period: unused monthly credits expire, the grant is credited, the period moves on. */
  const newPeriod = (accountId: string, wallet: MemoryWallet, reason: { expire: string; grant: string }) => {
    if (wallet.monthly > 0) {
      journal({ accountId, entryType: "expire", bucket: "monthly", amount: -wallet.monthly, monthlyAfter: 0, topupAfter: wallet.topup, operation: "rollover", reason: reason.expire })
    }
    if (wallet.monthlyGrant > 0) {
      journal({ accountId, entryType: "grant", bucket: "monthly", amount: wallet.monthlyGrant, monthlyAfter: wallet.monthlyGrant, topupAfter: wallet.topup, operation: "rollover", reason: reason.grant })
    }
    wallet.monthly = wallet.monthlyGrant
  }

  const rollOver = (accountId: string | null) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      let rolled = 0
      for (const [id, wallet] of state.wallets) {
        if (wallet.periodEnd === null || wallet.periodEnd > now || (accountId !== null && id !== accountId)) continue
        newPeriod(id, wallet, { expire: "monthly period ended", grant: "monthly grant" })
        let k = 1
        while (addMonths(wallet.periodAnchor, k) <= now) k++
        wallet.periodEnd = addMonths(wallet.periodAnchor, k)
        rolled++
      }
      return rolled
    })

  const openWallet = ({ accountId, monthlyGrant }: { readonly accountId: string; readonly monthlyGrant: number }) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      if (state.wallets.has(accountId)) return Effect.die(new Error(`duplicate wallet ${accountId}`))
      state.wallets.set(accountId, { monthly: 0, topup: 0, periodAnchor: now, periodEnd: monthlyGrant > 0 ? addMonths(now, 1) : null, monthlyGrant })
      return Effect.void
    })

  const startNewPeriod = ({ accountId, monthlyGrant }: { readonly accountId: string; readonly monthlyGrant: number }) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const wallet = state.wallets.get(accountId)
      if (wallet === undefined) return
      wallet.monthlyGrant = monthlyGrant
      newPeriod(accountId, wallet, { expire: "plan changed", grant: "plan changed" })
      wallet.periodAnchor = now
      wallet.periodEnd = monthlyGrant > 0 ? addMonths(now, 1) : null
    })

  return {
    journal,
    statements: {
      findWallet: (accountId: string) =>
        Effect.sync(() =>
          Option.map(Option.fromNullishOr(state.wallets.get(accountId)), (wallet) => ({
            monthly_balance: wallet.monthly,
            topup_balance: wallet.topup,
            monthly_period_end: wallet.periodEnd === null ? null : new Date(wallet.periodEnd),
            next_grant_expiry: Option.getOrNull(Option.map(Option.fromNullishOr(nextGrantExpiry(accountId)), (at) => new Date(at)))
          }))
        ),
      rollOver,
      openWallet,
      startNewPeriod
    }
  }
}

type Budgets = ReturnType<typeof budgetsOf>
type Grants = ReturnType<typeof grantsOf>

/** Monthly first, then top-up; refused (balances null) when short, past the key's limit, or when the period has ended. */
const debitIn = (state: MemoryLedgerState, journal: ReturnType<typeof walletStatements>["journal"], budgets: Budgets, grants: Grants) =>
(input: DebitInput, hold: { readonly holdId: string; readonly expiresInSeconds: number | null } | null) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    const wallet = state.wallets.get(input.accountId)
    if (wallet === undefined) return Option.none()
    const key = budgets.check(input.keyId, keyPeriodEnd(wallet.periodEnd, now), input.amount)
    const limit = { spend_limit: key?.budget.limit ?? null, key_period_end: key === null ? null : new Date(key.periodEnd) }
    const nextExpiry = grants.nextExpiry(input.accountId)
    const due = { rollover_due: wallet.periodEnd !== null && wallet.periodEnd <= now, expiry_due: nextExpiry !== null && nextExpiry <= now }
    const refused = () => Option.some({ ...due, monthly_balance: null, topup_balance: null, over_limit: key?.overLimit ?? false, ...limit })
    if (due.rollover_due || due.expiry_due || wallet.monthly + wallet.topup < input.amount || key?.overLimit === true) return refused()
    if (key !== null) Object.assign(key.budget, { spent: key.spent + input.amount, periodEnd: key.periodEnd })
    const { accountId, keyId, operation, referenceId } = input
    const fromMonthly = Math.min(wallet.monthly, input.amount)
    const fromTopup = input.amount - fromMonthly
    const topupBefore = wallet.topup
    wallet.monthly -= fromMonthly
    wallet.topup -= fromTopup
    const topupGrants = fromTopup > 0 ? grants.take(input.accountId, fromTopup, now) : []
    const holdId = hold?.holdId ?? null
    if (hold !== null) {
      state.holds.set(hold.holdId, {
        id: hold.holdId,
        accountId,
        monthlyAmount: fromMonthly,
        topupAmount: fromTopup,
        operation,
        expiresAt: hold.expiresInSeconds === null ? null : now + hold.expiresInSeconds * 1000,
        periodEnd: wallet.periodEnd,
        keyId,
        keyPeriodEnd: key?.periodEnd ?? null,
        topupGrants,
        status: "pending"
      })
    }
    const row = { accountId, entryType: "reserve", holdId, operation, referenceId, reason: null, keyId } as const
    if (fromMonthly > 0) journal({ ...row, bucket: "monthly", amount: -fromMonthly, monthlyAfter: wallet.monthly, topupAfter: topupBefore })
    if (fromTopup > 0) journal({ ...row, bucket: "topup", amount: -fromTopup, monthlyAfter: wallet.monthly, topupAfter: wallet.topup })
    return Option.some({ ...due, monthly_balance: wallet.monthly, topup_balance: wallet.topup, over_limit: false, ...limit })
  })

const holdStatements = (state: MemoryLedgerState, journal: ReturnType<typeof walletStatements>["journal"], budgets: Budgets, grants: Grants) => {
  const debit = debitIn(state, journal, budgets, grants)
  /** Posts `charge` (monthly first) and releases the rest; a monthly rest from an ended period expires at once. */
  const resolve = (holdId: string, charge: number, status: "settled" | "refunded" | "voided") =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const hold = state.holds.get(holdId)
      const wallet = hold === undefined ? undefined : state.wallets.get(hold.accountId)
      if (hold === undefined || wallet === undefined || hold.status !== "pending" || charge > hold.monthlyAmount + hold.topupAmount) {
        return Option.none()
      }
      hold.status = status
      const settledMonthly = Math.min(hold.monthlyAmount, charge)
      const backMonthly = hold.monthlyAmount - settledMonthly
      const backTopup = hold.topupAmount - (charge - settledMonthly)
      const lapsed = hold.periodEnd !== wallet.periodEnd
      const keptMonthly = lapsed ? 0 : backMonthly
      const keptTopup = grants.giveBack(hold.topupGrants, backTopup, now)
      wallet.monthly += keptMonthly
      wallet.topup += keptTopup
      budgets.giveBack(hold.keyId, hold.keyPeriodEnd, backMonthly + backTopup)
      const row = { accountId: hold.accountId, holdId, operation: hold.operation, referenceId: null, topupAfter: wallet.topup, keyId: hold.keyId } as const
      if (backTopup > 0) {
        const monthlyAfter = wallet.monthly - keptMonthly
        journal({ ...row, entryType: "release", bucket: "topup", amount: backTopup, monthlyAfter, topupAfter: wallet.topup + backTopup - keptTopup, reason: null })
      }
      if (backTopup > keptTopup) {
        journal({ ...row, entryType: "expire", bucket: "topup", amount: keptTopup - backTopup, monthlyAfter: wallet.monthly - keptMonthly, reason: "top-up grant expired while held" })
      }
      if (backMonthly > 0) {
        journal({ ...row, entryType: "release", bucket: "monthly", amount: backMonthly, monthlyAfter: wallet.monthly - keptMonthly + backMonthly, reason: null })
      }
      if (backMonthly > 0 && lapsed) {
        journal({ ...row, entryType: "expire", bucket: "monthly", amount: -backMonthly, monthlyAfter: wallet.monthly, reason: "monthly period ended while held" })
      }
      return Option.some({ charged: charge, monthly_balance: wallet.monthly, topup_balance: wallet.topup, operation: hold.operation })
    })

  return {
    reserveHold: (input: Parameters<Repo["reserveHold"]>[0]) => debit(input, input),
    chargeAtOnce: (input: DebitInput) => debit(input, null),
    settleHold: ({ charge, holdId }: { readonly holdId: string; readonly charge: number }) => resolve(holdId, charge, "settled"),
    refundHold: (holdId: string) => resolve(holdId, 0, "refunded"),
    voidHold: (holdId: string) => resolve(holdId, 0, "voided"),
    expiredHoldIds: (limit: number) =>
      Effect.map(Clock.currentTimeMillis, (now) =>
        [...state.holds.values()]
          .filter((hold) => hold.status === "pending" && hold.expiresAt !== null && hold.expiresAt <= now)
          .sort((a, b) => (a.expiresAt ?? 0) - (b.expiresAt ?? 0))
          .slice(0, limit)
          .map((hold) => hold.id)),
    noteDepleted: (accountId: string) => Effect.sync(() => void state.depleted.push(accountId))
  }
}

/**
 * A fresh in-memory ledger: its layer, and its state for a test to read. `keys` are the API keys
 * debits may count against (the KeysRepo memory's `state.keys`); a key not there has no budget.
 */
export const makeLedgerRepoInMemory = (keys: ReadonlyMap<string, { readonly accountId: string }> = new Map()) => {
  const state: MemoryLedgerState = {
    wallets: new Map(), holds: new Map(), journal: [], grants: new Map(), depleted: [], budgets: new Map(), limitEvents: []
  }
  // The grants' map is read through `state` at each call: a failed transaction restores another one.
  const grants = grantsOf(() => state.grants, {
    get: (accountId) => state.wallets.get(accountId),
    journal: (row) => wallets.journal(row),
    grantRows: () => state.journal
  })
  const wallets = walletStatements(state, grants.nextExpiry)
  const budgets = budgetsOf(state, keys, (accountId) => state.wallets.get(accountId)?.periodEnd)
  const repo: Repo = {
    ...wallets.statements,
    ...holdStatements(state, wallets.journal, budgets, grants),
    ...budgets.statements,
    ...grants.statements,
    withTransaction: (effect) =>
      Effect.suspend(() => {
        const snapshot = copyState(state)
        return Effect.onExit(effect, (exit) =>
          Effect.sync(() => {
            if (Exit.isFailure(exit)) Object.assign(state, snapshot)
          }))
      })
  }
  return { layer: Layer.succeed(LedgerRepo, repo), state }
}
