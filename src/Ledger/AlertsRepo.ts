/** The low-balance alert's two columns of the wallet row: its threshold and whether it is armed. */
import { Context, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"

export const AlertRow = Schema.Struct({
  low_balance_threshold: Schema.NullOr(Schema.Number),
  low_balance_armed: Schema.Boolean
})
export type AlertRow = typeof AlertRow.Type

/** The alert columns of a wallet; None when the account has no wallet. Database failures are defects. */
export interface AlertsRepoService {
  readonly findAlert: (accountId: string) => Effect.Effect<Option.Option<AlertRow>>
  /** Sets the threshold; armed when the balance is at or above it now (a wallet already below waits for a grant). */
  readonly setThreshold: (accountId: string, threshold: number) => Effect.Effect<Option.Option<AlertRow>>
  /** Removes the threshold and disarms the alert. */
  readonly clearThreshold: (accountId: string) => Effect.Effect<Option.Option<AlertRow>>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const findAlert = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: AlertRow,
    execute: (accountId) => sql`SELECT low_balance_threshold, low_balance_armed FROM wallets WHERE account_id = ${accountId}`
  })

  /** Sets the threshold; armed when the balance is at or above it now (a wallet already below waits for a grant). */
  const setThreshold = SqlSchema.findOneOption({
    Request: Schema.Struct({ accountId: Schema.String, threshold: Schema.Number }),
    Result: AlertRow,
    execute: ({ accountId, threshold }) =>
      sql`
      UPDATE wallets
         SET low_balance_threshold = ${threshold},
             low_balance_armed = monthly_balance + topup_balance >= ${threshold}
       WHERE account_id = ${accountId}
      RETURNING low_balance_threshold, low_balance_armed`
  })

  const clearThreshold = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: AlertRow,
    execute: (accountId) =>
      sql`
      UPDATE wallets SET low_balance_threshold = NULL, low_balance_armed = false
       WHERE account_id = ${accountId}
      RETURNING low_balance_threshold, low_balance_armed`
  })

  return AlertsRepo.of(atRepoBoundary("AlertsRepo", {
    findAlert,
    setThreshold: (accountId: string, threshold: number) => setThreshold({ accountId, threshold }),
    clearThreshold
  }))
})

export class AlertsRepo extends Context.Service<AlertsRepo, AlertsRepoService>()("hookline/AlertsRepo") {
  static readonly layer = Layer.effect(AlertsRepo, make)
}
