/**
 * The Ledger's decisions with no database: the Ledger service over the in-memory LedgerRepo
 * (src/Ledger/RepoMemory.ts), time from TestClock. Monthly credits are spent first, a refund goes
 * back to the buckets it came from, a period that ended rolls over before anything is taken, and
 * monthly credits held across a rollover expire when the hold is resolved. After every test the
 * journal accounts for every credit: per bucket, balance == sum(journal).
 *
 * These cases run on the twin only. ledger.test.ts and ledger-service.test.ts test the PostgreSQL
 * repository with cases of their own, not these: a rule the twin and the SQL answer differently is
 * caught only where both files happen to test it.
 */
import { describe, expect, test } from "bun:test"
import { Effect, Exit, Layer, Option, References } from "effect"
import { TestClock } from "effect/testing"
import { Ledger } from "../src/Ledger/Ledger.js"
import { type MemoryLedgerState, makeLedgerRepoInMemory } from "../src/Ledger/RepoMemory.js"

const start = Date.UTC(2026, 0, 15, 12)

/** Runs `body` against a fresh in-memory Ledger, the clock at `start`; answers its result and the state. */
const run = <A, E>(body: (ledger: Ledger["Service"]) => Effect.Effect<A, E, never>) => {
  const memory = makeLedgerRepoInMemory()
  const program = Effect.gen(function*() {
    yield* TestClock.setTime(start)
    return yield* body(yield* Ledger)
  }).pipe(
    Effect.provide(Layer.mergeAll(
      Ledger.layerWithoutDependencies.pipe(Layer.provide(memory.layer)),
      TestClock.layer(),
      Layer.succeed(References.MinimumLogLevel, "Error")
    ))
  )
  return Effect.runPromise(Effect.exit(program)).then((exit) => ({ exit, state: memory.state }))
}

const success = <A, E>(exit: Exit.Exit<A, E>): A => {
  if (Exit.isFailure(exit)) throw new Error(`expected success, got ${String(exit.cause)}`)
  return exit.value
}

/** Every balance equals the sum of its journal rows. */
const expectBalanced = (state: MemoryLedgerState) => {
  for (const [accountId, wallet] of state.wallets) {
    const sum = (bucket: string) =>
      state.journal.filter((row) => row.accountId === accountId && row.bucket === bucket).reduce((total, row) => total + row.amount, 0)
    expect({ monthly: wallet.monthly, topup: wallet.topup }).toEqual({ monthly: sum("monthly"), topup: sum("topup") })
  }
}

const open = (ledger: Ledger["Service"], opening: { monthlyGrant: number; monthlyBalance: number; topupBalance: number }) =>
  Effect.as(ledger.openWallet("acct_a", opening), "acct_a")

describe("the Ledger's decisions, in memory", () => {
  test("a reserve takes monthly credits first, then top-up", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 })
        const hold = yield* ledger.reserve(account, 8, { operation: "search" })
        return { hold, wallet: yield* ledger.wallet(account) }
      }))
    const { hold, wallet } = success(exit)
    expect(hold.balancesAfter).toEqual({ monthly: 0, topup: 7 })
    expect(wallet).toMatchObject({ monthly: 0, topup: 7 })
    expect(state.journal.filter((row) => row.entryType === "reserve").map((row) => [row.bucket, row.amount])).toEqual([
      ["monthly", -5],
      ["topup", -3]
    ])
    expectBalanced(state)
  })

  test("a refund gives each credit back to the bucket it came from; a settle posts monthly first and releases top-up first", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 })
        const refunded = yield* ledger.refund((yield* ledger.reserve(account, 8, { operation: "search" })).id)
        const settled = yield* ledger.settle((yield* ledger.reserve(account, 8, { operation: "search" })).id, 6)
        return { refunded, settled }
      }))
    const { refunded, settled } = success(exit)
    expect(Option.getOrThrow(refunded)).toEqual({ charged: 0, balancesAfter: { monthly: 5, topup: 10 } })
    // 6 of the 8 held (5 monthly, 3 top-up) are posted: all 5 monthly and 1 top-up; 2 top-up come back.
    expect(Option.getOrThrow(settled)).toEqual({ charged: 6, balancesAfter: { monthly: 0, topup: 9 } })
    expectBalanced(state)
  })

  test("a hold resolves once: a second settle or refund changes nothing", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 10 })
        const hold = yield* ledger.reserve(account, 2, { operation: "list" })
        yield* ledger.settle(hold.id, 1)
        return { again: yield* ledger.settle(hold.id, 2), refund: yield* ledger.refund(hold.id), wallet: yield* ledger.wallet(account) }
      }))
    const { again, refund, wallet } = success(exit)
    expect(Option.isNone(again) && Option.isNone(refund)).toBe(true)
    expect(wallet.topup).toBe(9)
    expectBalanced(state)
  })

  test("short: the reserve is refused, nothing changes, and the refusal is noted once per call", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 100, monthlyBalance: 1, topupBalance: 0 })
        return yield* Effect.flip(ledger.reserve(account, 2, { operation: "search" }))
      }))
    expect(success(exit)._tag).toBe("InsufficientCredits")
    expect(state.wallets.get("acct_a")).toMatchObject({ monthly: 1, topup: 0 })
    expect(state.holds.size).toBe(0)
    expect(state.depleted).toEqual(["acct_a"])
    expectBalanced(state)
  })

  test("a period that ended rolls over before the next debit: unused monthly credits expire, the grant is credited", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 100, monthlyBalance: 40, topupBalance: 10 })
        yield* TestClock.adjust("32 days")
        const hold = yield* ledger.reserve(account, 3, { operation: "search" })
        return { hold, wallet: yield* ledger.wallet(account) }
      }))
    const { hold, wallet } = success(exit)
    expect(hold.balancesAfter).toEqual({ monthly: 97, topup: 10 })
    // The new period ends one month after the last end: the anchor's day, not the rollover's.
    expect(wallet.periodEnd?.toISOString()).toBe("2026-03-15T12:00:00.000Z")
    expect(state.journal.filter((row) => row.operation === "rollover").map((row) => [row.entryType, row.amount, row.reason])).toEqual([
      ["expire", -40, "monthly period ended"],
      ["grant", 100, "monthly grant"]
    ])
    expectBalanced(state)
  })

  test("a grant after the period ended rolls over first, so it lands in the new period", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 100, monthlyBalance: 100, topupBalance: 0 })
        yield* TestClock.adjust("31 days")
        return yield* ledger.grant(account, "monthly", 5, { reason: "goodwill" })
      }))
    // Rolled over first (100 expire, 100 granted), then the 5: a grant is never lost to a rollover after it.
    expect(success(exit)).toMatchObject({ monthly: 105, topup: 0 })
    expectBalanced(state)
  })

  test("monthly credits held across a rollover expire when the hold is resolved; top-up comes back", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 })
        const hold = yield* ledger.reserve(account, 8, { operation: "prediction", expires: false })
        yield* TestClock.adjust("31 days")
        yield* ledger.wallet(account)
        const refunded = yield* ledger.refund(hold.id)
        return { refunded, wallet: yield* ledger.wallet(account) }
      }))
    const { refunded, wallet } = success(exit)
    // 5 monthly were held in the old period: released and expired at once, not added to the new grant.
    expect(Option.getOrThrow(refunded).balancesAfter).toEqual({ monthly: 100, topup: 10 })
    expect(wallet).toMatchObject({ monthly: 100, topup: 10 })
    expect(state.journal.filter((row) => row.holdId !== null && row.entryType !== "reserve").map((row) => [row.entryType, row.bucket, row.amount]))
      .toEqual([
        ["release", "topup", 3],
        ["release", "monthly", 5],
        ["expire", "monthly", -5]
      ])
    expectBalanced(state)
  })

  test("a grant's reference credits once; the same reference with another amount is refused", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 0 })
        const details = { referenceId: "inv_1" }
        yield* ledger.grant(account, "topup", 50, details)
        const repeat = yield* ledger.grant(account, "topup", 50, details)
        const conflict = yield* Effect.flip(ledger.grant(account, "topup", 60, details))
        return { repeat, conflict }
      }))
    const { conflict, repeat } = success(exit)
    expect(repeat.topup).toBe(50)
    expect(conflict._tag).toBe("ValidationFailed")
    expectBalanced(state)
  })

  test("holds left pending past HOLD_TIMEOUT are voided by the sweep, their credits back", async () => {
    const { exit, state } = await run((ledger) =>
      Effect.gen(function*() {
        const account = yield* open(ledger, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 10 })
        yield* ledger.reserve(account, 2, { operation: "search" })
        const early = yield* ledger.voidExpiredHolds
        yield* TestClock.adjust(ledger.config.holdTimeout)
        return { early, late: yield* ledger.voidExpiredHolds, wallet: yield* ledger.wallet(account) }
      }))
    expect(success(exit)).toMatchObject({ early: 0, late: 1, wallet: { topup: 10 } })
    expectBalanced(state)
  })
})
