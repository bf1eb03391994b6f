/**
 * Key budgets: an API key's optional spend limit per period of its account, and what it spent in
 * the current one. The debits count it themselves (LedgerRepo's debit and resolve statements,
 * under the wallet's lock); this service sets a limit and reads a budget for the contract.
 *
 * A key's period is its account's monthly period; an account without a monthly grant has none,
 * and its keys count per calendar month (UTC).
 */
import { Context, Effect, Layer, Option } from "effect"
import { currentDate } from "../Repository.js"
import { toTimestamp } from "../Schemas.js"
import type { KeySpend } from "./Api.js"
import { LedgerRepo } from "./Repo.js"
import type { KeyBudgetRow } from "./RepoBudgets.js"

const toKeySpend = (row: KeyBudgetRow): KeySpend => ({
  object: "key_spend",
  key_id: row.key_id,
  spend_limit: row.spend_limit,
  period_spent: row.period_spent,
  period_end: toTimestamp(row.period_end)
})

/** API keys' spend limits and what they spent in the current period. */
export interface KeyBudgetsService {
  /** The key's budget (None: no such key), after any rollover of its account that is due. */
  readonly read: (keyId: string) => Effect.Effect<Option.Option<KeySpend>>
  /**
   * Sets the key's limit (null: none) and answers its budget; None when no such key. What the key
   * spent in the period stays counted: a limit below it refuses its next debit.
   */
  readonly setLimit: (keyId: string, spendLimit: number | null) => Effect.Effect<Option.Option<KeySpend>>
}

const make = Effect.gen(function*() {
  const repo = yield* LedgerRepo

  const read = (keyId: string) =>
    Effect.gen(function*() {
      const row = yield* repo.findKeyBudget(keyId)
      if (Option.isSome(row) && row.value.period_end <= (yield* currentDate)) {
        yield* repo.rollOver(row.value.account_id)
        return Option.map(yield* repo.findKeyBudget(keyId), toKeySpend)
      }
      return Option.map(row, toKeySpend)
    }).pipe(Effect.withSpan("KeyBudgets.read", { attributes: { keyId } }))

  const setLimit = (keyId: string, spendLimit: number | null) =>
    Effect.gen(function*() {
      const set = yield* repo.setSpendLimit({ keyId, spendLimit })
      if (Option.isNone(set)) return Option.none<KeySpend>()
      return yield* read(keyId)
    }).pipe(Effect.withSpan("KeyBudgets.setLimit", { attributes: { keyId } }))

  return KeyBudgets.of({ read, setLimit })
})

export class KeyBudgets extends Context.Service<KeyBudgets, KeyBudgetsService>()("hookline/KeyBudgets") {
  /** Takes its LedgerRepo from the caller (the in-memory one in a test). */
  static readonly layerWithoutDependencies = Layer.effect(KeyBudgets, make)
  static readonly layer = KeyBudgets.layerWithoutDependencies.pipe(Layer.provide(LedgerRepo.layer))
}
