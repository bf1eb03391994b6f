/**
 * Key budgets in the ledger's repository: the same cases against the PostgreSQL LedgerRepo (on a
 * database of this file's own) and the memory one (src/Ledger/RepoBudgetsMemory.ts), asserting
 * what the Ledger relies on. Then the Ledger and KeyBudgets services over the memory repository
 * with TestClock: the count of a new period, and the refusal's error.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Exit, Layer, ManagedRuntime, Option, References } from "effect"
import { TestClock } from "effect/testing"
import fc from "fast-check"
import { AccountsRepo } from "../src/Admin/Repo.js"
import { makeAccountsRepoInMemory } from "../src/Admin/RepoMemory.js"
import { KeysRepo } from "../src/Auth/Repo.js"
import { makeKeysRepoInMemory } from "../src/Auth/RepoMemory.js"
import { newId, sha256Hex } from "../src/Ids.js"
import { KeyBudgets } from "../src/Ledger/Budgets.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { LedgerRepo } from "../src/Ledger/Repo.js"
import { makeLedgerRepoInMemory } from "../src/Ledger/RepoMemory.js"
import { fileDatabase } from "./support/fileDatabase.js"

type Repos = AccountsRepo | KeysRepo | LedgerRepo

const memoryRepos = () => {
  const accounts = makeAccountsRepoInMemory()
  const keys = makeKeysRepoInMemory({ accounts: accounts.state.accounts })
  const ledger = makeLedgerRepoInMemory(keys.state.keys)
  return { ledger, layer: Layer.mergeAll(accounts.layer, keys.layer, ledger.layer) }
}

const postgres = fileDatabase(Layer.mergeAll(AccountsRepo.layer, KeysRepo.layer, LedgerRepo.layer))

const backends: ReadonlyArray<{ readonly name: string; readonly run: <A>(effect: Effect.Effect<A, never, Repos>) => Promise<A> }> = [
  { name: "PostgreSQL", run: (effect) => postgres.run(effect) },
  { name: "memory", run: (effect) => Effect.runPromise(Effect.provide(effect, memoryRepos().layer)) }
]

/** An account (no monthly grant unless given) with `topup` credits and one key. */
const openAccount = (topup: number, monthlyGrant = 0) =>
  Effect.gen(function*() {
    const accounts = yield* AccountsRepo
    const ledger = yield* LedgerRepo
    const keys = yield* KeysRepo
    const accountId = newId("acct")
    const keyId = newId("key")
    yield* accounts.insertAccount({ id: accountId, name: null, plan: "pro", monthlyGrant })
    yield* ledger.openWallet({ accountId, monthlyGrant })
    if (monthlyGrant > 0) yield* ledger.grant({ accountId, bucket: "monthly", amount: monthlyGrant, reason: null, referenceId: null, requestId: null })
    if (topup > 0) yield* ledger.grant({ accountId, bucket: "topup", amount: topup, reason: null, referenceId: null, requestId: null })
    yield* keys.insertKey({ id: keyId, accountId, keyHash: sha256Hex(keyId), scopes: [] })
    return { accountId, keyId }
  })

const debit = (accountId: string, keyId: string | null, amount: number, hold = true) =>
  Effect.gen(function*() {
    const ledger = yield* LedgerRepo
    const fields = { accountId, amount, operation: "search" as const, referenceId: null, requestId: null, keyId }
    const holdId = newId("hold")
    const row = Option.getOrThrow(
      hold ? yield* ledger.reserveHold({ ...fields, holdId, expiresInSeconds: 600 }) : yield* ledger.chargeAtOnce(fields)
    )
    return { ...row, holdId }
  })

const budgetOf = (keyId: string) => Effect.flatMap(LedgerRepo, (ledger) => Effect.map(ledger.findKeyBudget(keyId), Option.getOrThrow))

/** The end of the current calendar month, UTC: the period of an account without a monthly grant. */
const calendarMonthEnd = () => {
  const now = new Date()
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1))
}

for (const backend of backends) {
  describe(`LedgerRepo key budgets: ${backend.name}`, () => {
    test("within the limit a debit passes and counts; past it, over_limit with the limit and period end, nothing changed", async () => {
      const outcome = await backend.run(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const { accountId, keyId } = yield* openAccount(100)
        expect(yield* ledger.setSpendLimit({ keyId, spendLimit: 10 })).toEqual(Option.some({ id: keyId }))
        const first = yield* debit(accountId, keyId, 6)
        const second = yield* debit(accountId, keyId, 4, false)
        const refused = yield* debit(accountId, keyId, 1)
        const wallet = Option.getOrThrow(yield* ledger.findWallet(accountId))
        return { first, second, refused, wallet, budget: yield* budgetOf(keyId) }
      }))
      expect(outcome.first).toMatchObject({ monthly_balance: 0, topup_balance: 94, over_limit: false, spend_limit: 10 })
      expect(outcome.second).toMatchObject({ topup_balance: 90, over_limit: false })
      expect(outcome.refused).toMatchObject({ rollover_due: false, monthly_balance: null, topup_balance: null, over_limit: true, spend_limit: 10 })
      expect(outcome.refused.key_period_end).toEqual(calendarMonthEnd())
      expect(outcome.wallet.topup_balance).toBe(90)
      expect(outcome.budget).toMatchObject({ spend_limit: 10, period_spent: 10 })
      expect(outcome.budget.period_end).toEqual(calendarMonthEnd())
    })

    test("an account with a monthly grant counts per its monthly period", async () => {
      const outcome = await backend.run(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const { accountId, keyId } = yield* openAccount(0, 50)
        yield* debit(accountId, keyId, 7)
        const wallet = Option.getOrThrow(yield* ledger.findWallet(accountId))
        return { wallet, budget: yield* budgetOf(keyId) }
      }))
      expect(outcome.budget).toMatchObject({ spend_limit: null, period_spent: 7 })
      expect(outcome.budget.period_end).toEqual(outcome.wallet.monthly_period_end ?? new Date(0))
    })

    test("a short wallet within the limit is refused without over_limit; past the limit over_limit wins", async () => {
      const outcome = await backend.run(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const { accountId, keyId } = yield* openAccount(5)
        yield* ledger.setSpendLimit({ keyId, spendLimit: 8 })
        return { short: yield* debit(accountId, keyId, 6), both: yield* debit(accountId, keyId, 9), budget: yield* budgetOf(keyId) }
      }))
      expect(outcome.short).toMatchObject({ topup_balance: null, over_limit: false })
      expect(outcome.both).toMatchObject({ topup_balance: null, over_limit: true })
      expect(outcome.budget.period_spent).toBe(0)
    })

    test("a hold's release gives its key the budget back: a refund all of it, a settle what it did not charge", async () => {
      const spent = await backend.run(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const { accountId, keyId } = yield* openAccount(100)
        yield* ledger.setSpendLimit({ keyId, spendLimit: 10 })
        const refunded = yield* debit(accountId, keyId, 10)
        yield* ledger.refundHold(refunded.holdId)
        const afterRefund = (yield* budgetOf(keyId)).period_spent
        const settled = yield* debit(accountId, keyId, 10)
        yield* ledger.settleHold({ holdId: settled.holdId, charge: 3 })
        const afterSettle = (yield* budgetOf(keyId)).period_spent
        // Resolving twice gives nothing back twice.
        yield* ledger.refundHold(settled.holdId)
        return { afterRefund, afterSettle, final: (yield* budgetOf(keyId)).period_spent, again: yield* debit(accountId, keyId, 7) }
      }))
      expect(spent).toMatchObject({ afterRefund: 0, afterSettle: 3, final: 3 })
      expect(spent.again.over_limit).toBe(false)
    })

    test("a key without a limit counts; a debit with no key counts nothing; a limit can be removed; an unknown key is None", async () => {
      const outcome = await backend.run(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const { accountId, keyId } = yield* openAccount(100)
        yield* debit(accountId, keyId, 4)
        yield* debit(accountId, null, 50)
        const counted = yield* budgetOf(keyId)
        yield* ledger.setSpendLimit({ keyId, spendLimit: 4 })
        const atLimit = yield* debit(accountId, keyId, 1)
        yield* ledger.setSpendLimit({ keyId, spendLimit: null })
        const removed = yield* debit(accountId, keyId, 1)
        return {
          counted,
          atLimit,
          removed,
          unknownSet: yield* ledger.setSpendLimit({ keyId: "key_unknown", spendLimit: 1 }),
          unknownRead: yield* ledger.findKeyBudget("key_unknown")
        }
      }))
      expect(outcome.counted).toMatchObject({ spend_limit: null, period_spent: 4 })
      expect(outcome.atLimit.over_limit).toBe(true)
      expect(outcome.removed).toMatchObject({ over_limit: false, spend_limit: null })
      expect(Option.isNone(outcome.unknownSet)).toBe(true)
      expect(Option.isNone(outcome.unknownRead)).toBe(true)
    })

    test("a limit of zero refuses every debit of the key", async () => {
      const refused = await backend.run(Effect.gen(function*() {
        const { accountId, keyId } = yield* openAccount(100)
        yield* Effect.flatMap(LedgerRepo, (ledger) => ledger.setSpendLimit({ keyId, spendLimit: 0 }))
        return yield* debit(accountId, keyId, 1, false)
      }))
      expect(refused).toMatchObject({ over_limit: true, spend_limit: 0, topup_balance: null })
    })
  })
}

type Step =
  | { readonly kind: "debit"; readonly key: 0 | 1 | null; readonly amount: number; readonly hold: boolean }
  | { readonly kind: "settle"; readonly pick: number; readonly fraction: number }
  | { readonly kind: "refund"; readonly pick: number }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    kind: fc.constant("debit" as const),
    key: fc.constantFrom(0 as const, 1 as const, null),
    amount: fc.integer({ min: 1, max: 12 }),
    hold: fc.boolean()
  }),
  fc.record({ kind: fc.constant("settle" as const), pick: fc.nat(), fraction: fc.double({ min: 0, max: 1, noNaN: true }) }),
  fc.record({ kind: fc.constant("refund" as const), pick: fc.nat() })
)

/**
 * Runs `steps` on a fresh account with 60 top-up credits and two keys, the first limited to
 * `limit`, against a model: each debit passes, or is refused by the limit (first) or the wallet;
 * a settle gives back what it does not charge, a refund all. Answers where the backend and the
 * model first disagree, or null.
 */
const runSteps = (limit: number, steps: ReadonlyArray<Step>) =>
  Effect.gen(function*() {
    const ledger = yield* LedgerRepo
    const { accountId, keyId } = yield* openAccount(60)
    const second = newId("key")
    yield* (yield* KeysRepo).insertKey({ id: second, accountId, keyHash: sha256Hex(second), scopes: [] })
    yield* ledger.setSpendLimit({ keyId, spendLimit: limit })
    const keys = [keyId, second]
    const model = { wallet: 60, spent: [0, 0] }
    const open: Array<{ readonly id: string; readonly amount: number; readonly key: 0 | 1 | null }> = []
    for (const [index, next] of steps.entries()) {
      if (next.kind === "debit") {
        const overLimit = next.key === 0 && model.spent[0] + next.amount > limit
        const short = model.wallet < next.amount
        const row = yield* debit(accountId, next.key === null ? null : keys[next.key], next.amount, next.hold)
        if (row.over_limit !== overLimit || (row.topup_balance === null) !== (overLimit || short)) return `step ${index}: ${JSON.stringify(row)}`
        if (overLimit || short) continue
        model.wallet -= next.amount
        if (next.key !== null) model.spent[next.key] += next.amount
        if (next.hold) open.push({ id: row.holdId, amount: next.amount, key: next.key })
        continue
      }
      const hold = open.splice(next.pick % Math.max(open.length, 1), 1)[0]
      if (hold === undefined) continue
      const charge = next.kind === "settle" ? Math.floor(hold.amount * next.fraction) : 0
      const resolved = next.kind === "settle" ? yield* ledger.settleHold({ holdId: hold.id, charge }) : yield* ledger.refundHold(hold.id)
      if (Option.isNone(resolved)) return `step ${index}: the hold was not pending`
      model.wallet += hold.amount - charge
      if (hold.key !== null) model.spent[hold.key] -= hold.amount - charge
    }
    const spent = [(yield* budgetOf(keys[0])).period_spent, (yield* budgetOf(keys[1])).period_spent]
    const wallet = Option.getOrThrow(yield* ledger.findWallet(accountId)).topup_balance
    return JSON.stringify({ wallet, spent }) === JSON.stringify(model) ? null : `end: ${JSON.stringify({ wallet, spent })} vs ${JSON.stringify(model)}`
  })

for (const backend of backends) {
  test(`property (${backend.name}): random debits, settles and refunds of two keys keep each key's spend as the model's, the limit never passed`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 40 }), fc.array(step, { maxLength: 25 }), async (limit, steps) => {
        expect(await backend.run(runSteps(limit, steps))).toBeNull()
      }),
      { numRuns: backend.name === "memory" ? 200 : 40, seed: 20261128 }
    )
  }, 60_000)
}

describe("the Ledger over the memory LedgerRepo", () => {
  const start = Date.UTC(2026, 0, 10, 12)
  const run = <A, E>(body: (memory: ReturnType<typeof memoryRepos>) => Effect.Effect<A, E, Ledger | KeyBudgets | Repos>) => {
    const memory = memoryRepos()
    const services = Layer.mergeAll(Ledger.layerWithoutDependencies, KeyBudgets.layerWithoutDependencies).pipe(Layer.provideMerge(memory.layer))
    return Effect.runPromiseExit(Effect.gen(function*() {
      yield* TestClock.setTime(start)
      return yield* body(memory)
    }).pipe(Effect.provide(Layer.mergeAll(services, TestClock.layer()).pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: {} })))))))
  }

  test("past the limit: SpendLimitReached naming the limit and the period end, one limit event per period", async () => {
    const memoryRef: Array<ReturnType<typeof memoryRepos>> = []
    const exit = await run((memory) =>
      Effect.gen(function*() {
        memoryRef.push(memory)
        const ledger = yield* Ledger
        const { accountId, keyId } = yield* openAccount(100)
        yield* Effect.flatMap(LedgerRepo, (repo) => repo.setSpendLimit({ keyId, spendLimit: 5 }))
        yield* ledger.reserve(accountId, 5, { operation: "search", keyId })
        const first = yield* Effect.flip(ledger.charge(accountId, 1, { operation: "hook", keyId }))
        const second = yield* Effect.flip(ledger.reserve(accountId, 2, { operation: "search", keyId }))
        return { first, second }
      })
    )
    if (Exit.isFailure(exit)) throw new Error(String(exit.cause))
    expect(exit.value.first._tag).toBe("SpendLimitReached")
    expect(exit.value.first.message).toBe(
      "This request costs 1 credits and would pass this key's spend limit of 5 credits for the period ending 2026-02-01T00:00:00.000Z."
    )
    expect(exit.value.second._tag).toBe("SpendLimitReached")
    expect(memoryRef[0].ledger.state.limitEvents).toEqual([{ keyId: expect.any(String), periodEnd: Date.UTC(2026, 1, 1) }])
  })

  test("a new monthly period counts from 0; a hold of the last period gives nothing back to the new one", async () => {
    const exit = await run(() =>
      Effect.gen(function*() {
        const ledger = yield* Ledger
        const budgets = yield* KeyBudgets
        const { accountId, keyId } = yield* openAccount(100, 30)
        yield* budgets.setLimit(keyId, 10)
        const held = yield* ledger.reserve(accountId, 10, { operation: "search", keyId })
        const before = Option.getOrThrow(yield* budgets.read(keyId))
        yield* TestClock.adjust("32 days")
        const rolled = Option.getOrThrow(yield* budgets.read(keyId))
        yield* ledger.reserve(accountId, 8, { operation: "search", keyId })
        yield* ledger.refund(held.id)
        return { before, rolled, after: Option.getOrThrow(yield* budgets.read(keyId)) }
      })
    )
    if (Exit.isFailure(exit)) throw new Error(String(exit.cause))
    expect(exit.value.before).toEqual({
      object: "key_spend",
      key_id: expect.any(String),
      spend_limit: 10,
      period_spent: 10,
      period_end: "2026-02-10T12:00:00.000Z"
    })
    expect(exit.value.rolled).toMatchObject({ period_spent: 0, period_end: "2026-03-10T12:00:00.000Z" })
    expect(exit.value.after).toMatchObject({ period_spent: 8 })
  })
})
