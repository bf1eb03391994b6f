/**
 * Low-balance alerts: the threshold an account sets and whether it is armed. The events
 * themselves are written by the database (migration 0007) in the transaction of the balance
 * change: `wallet.low_balance` by a trigger on the wallet row when a debit takes an armed
 * wallet below its threshold, `wallet.depleted` by hookline_wallet_depleted() when the Ledger
 * refuses a reserve; a grant (billing, admin, or a new period) re-arms both.
 */
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { orDieOnDb } from "../Sql.js"
import type { WalletAlert } from "./Api.js"

const AlertRow = Schema.Struct({
  low_balance_threshold: Schema.NullOr(Schema.Number),
  low_balance_armed: Schema.Boolean
})

const toAlert = (rows: ReadonlyArray<typeof AlertRow.Type>): Effect.Effect<WalletAlert> =>
  rows.length === 0
    ? Effect.die(new Error("No wallet for this account"))
    : Effect.succeed({ object: "wallet_alert", threshold: rows[0].low_balance_threshold, armed: rows[0].low_balance_armed })

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const decode = Schema.decodeUnknownEffect(Schema.Array(AlertRow))

  const get = (accountId: string) =>
    sql`SELECT low_balance_threshold, low_balance_armed FROM wallets WHERE account_id = ${accountId}`.pipe(
      Effect.flatMap(decode),
      orDieOnDb,
      Effect.flatMap(toAlert)
    )

  /** Sets the threshold; armed when the balance is at or above it now (a wallet already below waits for a grant). */
  const set = (accountId: string, threshold: number) =>
    sql`
      UPDATE wallets
         SET low_balance_threshold = ${threshold},
             low_balance_armed = monthly_balance + topup_balance >= ${threshold}
       WHERE account_id = ${accountId}
      RETURNING low_balance_threshold, low_balance_armed`.pipe(Effect.flatMap(decode), orDieOnDb, Effect.flatMap(toAlert))

  const clear = (accountId: string) =>
    sql`
      UPDATE wallets SET low_balance_threshold = NULL, low_balance_armed = false
       WHERE account_id = ${accountId}
      RETURNING low_balance_threshold, low_balance_armed`.pipe(Effect.flatMap(decode), orDieOnDb, Effect.flatMap(toAlert))

  return { get, set, clear } as const
})

export class WalletAlerts extends Context.Service<WalletAlerts, Effect.Success<typeof make>>()("hookline/WalletAlerts") {
  static readonly layer = Layer.effect(WalletAlerts, make)
}
