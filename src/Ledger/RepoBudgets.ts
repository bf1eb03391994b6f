/**
 * LedgerRepo's statements on key budgets (the spend columns of `api_keys`): setting a key's
 * limit, reading its spend in the current period, and noting a refusal by its limit. The
 * counting itself is in the debit and resolve statements (RepoSql.ts), under the wallet's lock.
 */
import { Effect, type Option, Schema } from "effect"
import { type SqlClient, SqlSchema } from "effect/sql"
import { currentDate } from "../Repository.js"
import { timeParameter } from "./RepoSql.js"

export const KeyBudgetRow = Schema.Struct({
  key_id: Schema.String,
  account_id: Schema.String,
  spend_limit: Schema.NullOr(Schema.Number),
  period_spent: Schema.Number,
  period_end: Schema.Date
})
export type KeyBudgetRow = typeof KeyBudgetRow.Type

const SpendLimit = Schema.Struct({ keyId: Schema.String, spendLimit: Schema.NullOr(Schema.Int) })

/** LedgerRepo's statements on key budgets, past its boundary (Repo.ts). */
export interface BudgetStatements {
  /** Sets (or with null removes) a key's limit; None when no such key. What it spent stays counted. */
  readonly setSpendLimit: (limit: typeof SpendLimit.Type) => Effect.Effect<Option.Option<{ readonly id: string }>>
  /** The key's limit and its spend in the current period of its account (0 when it has not spent in it). */
  readonly findKeyBudget: (keyId: string) => Effect.Effect<Option.Option<KeyBudgetRow>>
  /** Notes a refusal by the key's limit: the first in a period sends key.spend_limit_reached. */
  readonly noteSpendLimitReached: (keyId: string) => Effect.Effect<void>
}

export const budgetStatements = (sql: SqlClient.SqlClient) => {
  /** Sets (or with null removes) a key's limit; None when no such key. What it spent stays counted. */
  const setSpendLimit = SqlSchema.findOneOption({
    Request: SpendLimit,
    Result: Schema.Struct({ id: Schema.String }),
    execute: ({ keyId, spendLimit }) => sql`UPDATE api_keys SET spend_limit = ${spendLimit} WHERE id = ${keyId} RETURNING id`
  })

  /** The key's limit and its spend in the current period of its account (0 when it has not spent in it). */
  const findKeyBudget = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: KeyBudgetRow,
    execute: (keyId) =>
      Effect.flatMap(currentDate, (now) =>
        sql`
        SELECT k.id AS key_id, k.account_id, k.spend_limit,
               CASE WHEN k.spend_period_end = p.period_end THEN k.period_spent ELSE 0 END AS period_spent, p.period_end
          FROM api_keys k JOIN wallets w ON w.account_id = k.account_id
          CROSS JOIN LATERAL (SELECT hookline_key_period_end(w.monthly_period_end, ${timeParameter(sql, now)}) AS period_end) p
         WHERE k.id = ${keyId}`)
  })

  /** The first refusal by the key's limit in a period sends key.spend_limit_reached (migration 0010's function decides). */
  const noteSpendLimitReached = SqlSchema.void({
    Request: Schema.String,
    execute: (keyId) => Effect.flatMap(currentDate, (now) => sql`SELECT hookline_key_spend_limit_reached(${keyId}, ${timeParameter(sql, now)})`)
  })

  return { setSpendLimit, findKeyBudget, noteSpendLimitReached }
}
