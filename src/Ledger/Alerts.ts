/**
 * Low-balance alerts: the threshold an account sets and whether it is armed. The events
 * themselves are written by the database (migration 0007) in the transaction of the balance
 * change: `wallet.low_balance` by a trigger on the wallet row when a debit takes an armed
 * wallet below its threshold, `wallet.depleted` by hookline_wallet_depleted() when the Ledger
 * refuses a reserve; a grant (billing, admin, or a new period) re-arms both.
 */
import { Context, Effect, Layer, Option } from "effect"
import type { WalletAlert } from "./Api.js"
import { type AlertRow, AlertsRepo } from "./AlertsRepo.js"
import { Ledger } from "./Ledger.js"

const toAlert = (row: Option.Option<AlertRow>): Effect.Effect<WalletAlert> =>
  Option.isNone(row)
    ? Effect.die(new Error("No wallet for this account"))
    : Effect.succeed({ object: "wallet_alert", threshold: row.value.low_balance_threshold, armed: row.value.low_balance_armed })

/** An account's low-balance alert. An account without a wallet is a defect (every account has one). */
export interface WalletAlertsService {
  /** The threshold (null: none) and whether the alert is armed. */
  readonly get: (accountId: string) => Effect.Effect<WalletAlert>
  /**
   * Sets the threshold, armed when the balance is at or above it now. A monthly rollover that is
   * due is applied first, so the threshold is judged against today's balance.
   */
  readonly set: (accountId: string, threshold: number) => Effect.Effect<WalletAlert>
  /** Removes the threshold: no low-balance events until one is set again. */
  readonly clear: (accountId: string) => Effect.Effect<WalletAlert>
}

const make = Effect.gen(function*() {
  const repo = yield* AlertsRepo
  const ledger = yield* Ledger

  const get = (accountId: string) => Effect.flatMap(repo.findAlert(accountId), toAlert)

  const set = (accountId: string, threshold: number) =>
    ledger.wallet(accountId).pipe(Effect.andThen(repo.setThreshold(accountId, threshold)), Effect.flatMap(toAlert))

  const clear = (accountId: string) => Effect.flatMap(repo.clearThreshold(accountId), toAlert)

  return WalletAlerts.of({ get, set, clear })
})

export class WalletAlerts extends Context.Service<WalletAlerts, WalletAlertsService>()("hookline/WalletAlerts") {
  /** Takes its AlertsRepo and Ledger from the caller (in-memory ones in a test). */
  static readonly layerWithoutDependencies = Layer.effect(WalletAlerts, make)
  static readonly layer = WalletAlerts.layerWithoutDependencies.pipe(Layer.provide([AlertsRepo.layer, Ledger.layer]))
}
