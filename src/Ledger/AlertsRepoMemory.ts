/**
 * AlertsRepo in memory: the low-balance alert columns of the in-memory wallets
 * (makeLedgerRepoInMemory's state), with the same rules as the PostgreSQL repository. For tests
 * of WalletAlerts that need no database; the PostgreSQL repository remains the proof of the SQL.
 *
 * What differs: migration 0007's triggers (a debit taking an armed wallet below its threshold
 * disarms it, a grant re-arms it) run here as a replay of the journal rows written since the last
 * call, before each statement, so the outcome is the same but no wallet.low_balance event is
 * written, and the alert state is not restored when a LedgerRepo transaction fails.
 */
import { Effect, Layer, Option } from "effect"
import { AlertsRepo } from "./AlertsRepo.js"
import type { MemoryJournalRow, MemoryLedgerState } from "./RepoMemory.js"

export interface MemoryAlert {
  threshold: number | null
  armed: boolean
}

export interface MemoryAlertsState {
  /** The wallets (and their journal) the alerts belong to. */
  readonly ledger: MemoryLedgerState
  /** By account id; a wallet with no entry has no threshold and is not armed (the columns' defaults). */
  alerts: Map<string, MemoryAlert>
  /** Journal rows whose trigger effects have been applied. */
  replayed: Set<MemoryJournalRow>
}

type Repo = AlertsRepo["Service"]

const unset = (): MemoryAlert => ({ threshold: null, armed: false })

/** A fresh alert state over `ledger`'s wallets: its layer, and its state for a test to read. */
export const makeAlertsRepoInMemory = (ledger: MemoryLedgerState, seed: ReadonlyMap<string, MemoryAlert> = new Map()) => {
  const state: MemoryAlertsState = {
    ledger,
    alerts: new Map([...seed].map(([accountId, alert]) => [accountId, { ...alert }])),
    replayed: new Set()
  }

  /** What the triggers did for each journal row not seen yet, in journal order. */
  const replayTriggers = () => {
    for (const row of state.ledger.journal) {
      if (state.replayed.has(row)) continue
      state.replayed.add(row)
      const alert = state.alerts.get(row.accountId)
      if (alert === undefined || alert.threshold === null) continue
      const total = row.monthlyAfter + row.topupAfter
      if (row.entryType === "grant") alert.armed ||= total >= alert.threshold
      else if (alert.armed && total < alert.threshold) alert.armed = false
    }
  }

  const rowOf = (alert: MemoryAlert) => ({ low_balance_threshold: alert.threshold, low_balance_armed: alert.armed })

  /** Runs `change` on the wallet's alert after the triggers; None when the account has no wallet. */
  const withWallet = <A>(accountId: string, change: (alert: MemoryAlert, total: number) => Effect.Effect<A>) =>
    Effect.suspend(() => {
      replayTriggers()
      const wallet = state.ledger.wallets.get(accountId)
      if (wallet === undefined) return Effect.succeed(Option.none<A>())
      const alert = state.alerts.get(accountId) ?? unset()
      state.alerts.set(accountId, alert)
      return Effect.map(change(alert, wallet.monthly + wallet.topup), Option.some)
    })

  const repo: Repo = {
    findAlert: (accountId) => withWallet(accountId, (alert) => Effect.succeed(rowOf(alert))),
    setThreshold: (accountId, threshold) =>
      withWallet(accountId, (alert, total) => {
        // `CHECK (low_balance_threshold > 0)`: a violation is a defect, as at the SQL boundary.
        if (threshold <= 0) return Effect.die(new Error(`low_balance_threshold must be > 0, got ${threshold}`))
        alert.threshold = threshold
        alert.armed = total >= threshold
        return Effect.succeed(rowOf(alert))
      }),
    clearThreshold: (accountId) =>
      withWallet(accountId, (alert) => {
        alert.threshold = null
        alert.armed = false
        return Effect.succeed(rowOf(alert))
      })
  }
  return { layer: Layer.succeed(AlertsRepo, repo), state }
}
