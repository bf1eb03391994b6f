import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, Option, Result } from "effect"
import fc from "fast-check"
import type Pg from "pg"
import { Accounts } from "../src/Admin/Accounts.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { createDatabase, dropDatabase, ledgerState } from "./support/server.js"
import { servicesRuntime } from "./support/runtime.js"
import PgPool from "pg"

let databaseUrl: string
let runtime: ReturnType<typeof servicesRuntime>
let db: Pg.Pool

beforeAll(async () => {
  databaseUrl = await createDatabase()
  runtime = servicesRuntime(databaseUrl, { HOLD_TIMEOUT: "100 millis" })
  db = new PgPool.Pool({ connectionString: databaseUrl, max: 2 })
})
afterAll(async () => {
  await runtime.dispose()
  await db.end()
  await dropDatabase(databaseUrl)
})

const run = <A, E>(effect: Effect.Effect<A, E, Ledger | Accounts>) => runtime.runPromise(effect)

const newAccount = (monthly: number, topup: number, plan: "pro" | "custom" = "custom") =>
  run(Effect.flatMap(Accounts, (accounts) =>
    accounts.create({ plan, monthly_grant: plan === "custom" ? 1_000 : undefined, monthly_balance: monthly, topup_balance: topup })
  )).then((account) => account.id)

const reserve = (accountId: string, amount: number, expires = true) =>
  run(Effect.flatMap(Ledger, (ledger) => ledger.reserve(accountId, amount, { operation: "search", expires }).pipe(Effect.result)))

const holdOf = async (accountId: string, amount: number, expires = true) => {
  const result = await reserve(accountId, amount, expires)
  if (Result.isFailure(result)) throw new Error("reserve failed")
  return result.success
}

const journal = async (accountId: string) =>
  (await db.query(
    "SELECT entry_type, bucket, amount::int, monthly_after::int, topup_after::int FROM credit_journal WHERE account_id = $1 ORDER BY seq",
    [accountId]
  )).rows

const expectBalanced = async (accountId: string) => {
  const state = await ledgerState(db, accountId)
  expect(state.monthly).toBe(state.journalMonthly)
  expect(state.topup).toBe(state.journalTopup)
  expect(state.monthly).toBeGreaterThanOrEqual(0)
  expect(state.topup).toBeGreaterThanOrEqual(0)
  return state
}

describe("reserve", () => {
  test("spends monthly first, then top-up, and journals each bucket", async () => {
    const account = await newAccount(5, 10)
    const hold = await holdOf(account, 8)
    expect(hold.balancesAfter).toEqual({ monthly: 0, topup: 7 })
    const { rows } = await db.query("SELECT monthly_amount::int, topup_amount::int, status FROM holds WHERE id = $1", [hold.id])
    expect(rows[0]).toEqual({ monthly_amount: 5, topup_amount: 3, status: "pending" })
    expect((await journal(account)).slice(-2)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -5, monthly_after: 0, topup_after: 10 },
      { entry_type: "reserve", bucket: "topup", amount: -3, monthly_after: 0, topup_after: 7 }
    ])
    await expectBalanced(account)
  })

  test("fails with insufficient credits and changes nothing when the total is short", async () => {
    const account = await newAccount(1, 1)
    const before = await journal(account)
    const result = await reserve(account, 3)
    expect(Result.isFailure(result)).toBe(true)
    if (Result.isFailure(result)) expect(result.failure._tag).toBe("InsufficientCredits")
    expect(await journal(account)).toEqual(before)
    const state = await expectBalanced(account)
    expect(state).toMatchObject({ monthly: 1, topup: 1, pendingHolds: 0 })
  })
})

describe("settle and refund", () => {
  test("settle posts the charge from monthly first and releases the rest top-up first", async () => {
    const account = await newAccount(5, 10)
    const hold = await holdOf(account, 8)
    const settled = await run(Effect.flatMap(Ledger, (ledger) => ledger.settle(hold.id, 4)))
    expect(Option.getOrThrow(settled)).toEqual({ charged: 4, balancesAfter: { monthly: 1, topup: 10 } })
    expect((await journal(account)).slice(-2)).toEqual([
      { entry_type: "release", bucket: "topup", amount: 3, monthly_after: 0, topup_after: 10 },
      { entry_type: "release", bucket: "monthly", amount: 1, monthly_after: 1, topup_after: 10 }
    ])
    await expectBalanced(account)
  })

  test("refund returns every credit to the bucket it came from", async () => {
    const account = await newAccount(2, 10)
    const hold = await holdOf(account, 5)
    const refunded = await run(Effect.flatMap(Ledger, (ledger) => ledger.refund(hold.id)))
    expect(Option.getOrThrow(refunded)).toEqual({ charged: 0, balancesAfter: { monthly: 2, topup: 10 } })
    await expectBalanced(account)
  })

  test("a hold resolves once: a second settle or refund changes nothing", async () => {
    const account = await newAccount(10, 0)
    const hold = await holdOf(account, 4)
    await run(Effect.flatMap(Ledger, (ledger) => ledger.settle(hold.id, 2)))
    const again = await run(Effect.flatMap(Ledger, (ledger) => ledger.settle(hold.id, 2)))
    const refund = await run(Effect.flatMap(Ledger, (ledger) => ledger.refund(hold.id)))
    expect(Option.isNone(again)).toBe(true)
    expect(Option.isNone(refund)).toBe(true)
    expect(await expectBalanced(account)).toMatchObject({ monthly: 8, topup: 0 })
  })

  test("settling more than was reserved is refused", async () => {
    const account = await newAccount(10, 0)
    const hold = await holdOf(account, 2)
    const over = await run(Effect.flatMap(Ledger, (ledger) => ledger.settle(hold.id, 3)))
    expect(Option.isNone(over)).toBe(true)
    expect(await expectBalanced(account)).toMatchObject({ monthly: 8, pendingHolds: 1 })
  })
})

describe("the hold sweeper", () => {
  test("voids holds left pending past their timeout, and leaves job holds alone", async () => {
    const account = await newAccount(10, 5)
    await holdOf(account, 12)
    const jobHold = await holdOf(account, 2, false)
    // Wait on the condition the sweeper acts on (the database's clock past the hold's expiry), not on a guessed delay.
    const expired = async () =>
      (await db.query("SELECT bool_and(expires_at <= now()) AS expired FROM holds WHERE account_id = $1 AND expires_at IS NOT NULL", [account]))
        .rows[0].expired === true
    while (!(await expired())) await Bun.sleep(10)
    const voided = await run(Effect.flatMap(Ledger, (ledger) => ledger.voidExpiredHolds))
    expect(voided).toBeGreaterThanOrEqual(1)
    const state = await expectBalanced(account)
    // The voided hold's 10 monthly + 2 top-up came back; the job hold still holds 2 top-up.
    expect(state).toMatchObject({ monthly: 10, topup: 3, pendingHolds: 1 })
    const { rows } = await db.query("SELECT status FROM holds WHERE id = $1", [jobHold.id])
    expect(rows[0].status).toBe("pending")
  })
})

describe("monthly rollover", () => {
  test("at period end unused monthly credits expire, the grant is restored and the period moves on", async () => {
    const account = await newAccount(300, 40, "pro")
    // Put the period three months in the past, as if nobody called since.
    await db.query(
      `UPDATE wallets SET period_anchor = now() - interval '3 months 2 days', monthly_period_end = now() - interval '2 months 2 days'
        WHERE account_id = $1`,
      [account]
    )
    const wallet = await run(Effect.flatMap(Ledger, (ledger) => ledger.wallet(account)))
    expect(wallet.monthly).toBe(1_000)
    expect(wallet.topup).toBe(40)
    const periodEnd = wallet.periodEnd!
    expect(periodEnd.getTime()).toBeGreaterThan(Date.now())
    expect(periodEnd.getTime()).toBeLessThan(Date.now() + 32 * 24 * 3600 * 1000)
    expect((await journal(account)).slice(-2)).toEqual([
      { entry_type: "expire", bucket: "monthly", amount: -300, monthly_after: 0, topup_after: 40 },
      { entry_type: "grant", bucket: "monthly", amount: 1_000, monthly_after: 1_000, topup_after: 40 }
    ])
    // A second look, and the background sweep, find nothing more to do.
    expect(await run(Effect.flatMap(Ledger, (ledger) => ledger.rollover(null)))).toBe(0)
    await expectBalanced(account)
  })

  test("a reserve after the period ended rolls over first", async () => {
    const account = await newAccount(0, 0, "pro")
    await db.query(
      "UPDATE wallets SET period_anchor = now() - interval '1 month 1 hour', monthly_period_end = now() - interval '1 hour' WHERE account_id = $1",
      [account]
    )
    const hold = await holdOf(account, 20)
    expect(hold.balancesAfter).toEqual({ monthly: 980, topup: 0 })
    await expectBalanced(account)
  })
})

describe("a hold across a monthly reset", () => {
  /** Ends the account's monthly period now and runs the rollover the sweeper would run. */
  const resetPeriod = async (account: string) => {
    await db.query(
      "UPDATE wallets SET period_anchor = now() - interval '1 month 1 hour', monthly_period_end = now() - interval '1 hour' WHERE account_id = $1",
      [account]
    )
    expect(await run(Effect.flatMap(Ledger, (ledger) => ledger.rollover(account)))).toBe(1)
  }

  test("refunded after the reset, its monthly part expires instead of landing on the new grant; its top-up part comes back", async () => {
    const account = await newAccount(100, 10, "pro")
    const hold = await holdOf(account, 105, false) // 100 monthly + 5 top-up, a prediction-like hold without timeout
    await resetPeriod(account)
    expect(await expectBalanced(account)).toMatchObject({ monthly: 1_000, topup: 5, pendingHolds: 1 })
    const refunded = await run(Effect.flatMap(Ledger, (ledger) => ledger.refund(hold.id)))
    expect(Option.getOrThrow(refunded)).toEqual({ charged: 0, balancesAfter: { monthly: 1_000, topup: 10 } })
    expect((await journal(account)).slice(-3)).toEqual([
      { entry_type: "release", bucket: "topup", amount: 5, monthly_after: 1_000, topup_after: 10 },
      { entry_type: "release", bucket: "monthly", amount: 100, monthly_after: 1_100, topup_after: 10 },
      { entry_type: "expire", bucket: "monthly", amount: -100, monthly_after: 1_000, topup_after: 10 }
    ])
    const { rows } = await db.query(
      "SELECT hold_id, operation, reason FROM credit_journal WHERE account_id = $1 AND entry_type = 'expire' ORDER BY seq DESC LIMIT 1",
      [account]
    )
    expect(rows[0]).toEqual({ hold_id: hold.id, operation: "search", reason: "monthly period ended while held" })
    expect(await expectBalanced(account)).toMatchObject({ monthly: 1_000, topup: 10, pendingHolds: 0 })
  })

  test("settled after the reset, it takes what it spent and the rest of its monthly part expires", async () => {
    const account = await newAccount(50, 0, "pro")
    const hold = await holdOf(account, 30, false)
    await resetPeriod(account)
    const settled = await run(Effect.flatMap(Ledger, (ledger) => ledger.settle(hold.id, 10)))
    expect(Option.getOrThrow(settled)).toEqual({ charged: 10, balancesAfter: { monthly: 1_000, topup: 0 } })
    expect((await journal(account)).slice(-2)).toEqual([
      { entry_type: "release", bucket: "monthly", amount: 20, monthly_after: 1_020, topup_after: 0 },
      { entry_type: "expire", bucket: "monthly", amount: -20, monthly_after: 1_000, topup_after: 0 }
    ])
    expect(await expectBalanced(account)).toMatchObject({ monthly: 1_000, pendingHolds: 0 })
  })

  test("a plan change starts a new period too: a hold voided after it returns nothing monthly", async () => {
    const account = await newAccount(40, 0, "pro")
    const hold = await holdOf(account, 40, false)
    await run(Effect.flatMap(Ledger, (ledger) => ledger.startNewPeriod(account, 500)))
    await db.query("UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = $1", [hold.id])
    expect(await run(Effect.flatMap(Ledger, (ledger) => ledger.voidExpiredHolds))).toBeGreaterThanOrEqual(1)
    expect(await expectBalanced(account)).toMatchObject({ monthly: 500, topup: 0, pendingHolds: 0 })
  })

  test("a hold opened and refunded in the same period returns everything", async () => {
    const account = await newAccount(50, 0, "pro")
    const hold = await holdOf(account, 30)
    await run(Effect.flatMap(Ledger, (ledger) => ledger.refund(hold.id)))
    expect(await expectBalanced(account)).toMatchObject({ monthly: 50, pendingHolds: 0 })
    expect((await journal(account)).some((row) => row.entry_type === "expire")).toBe(false)
  })
})

describe("concurrency", () => {
  test("100 concurrent reserves of 3 on 50 credits: exactly 16 succeed, nothing lost", async () => {
    const account = await newAccount(20, 30)
    const results = await run(Effect.flatMap(Ledger, (ledger) =>
      Effect.all(
        Array.from({ length: 100 }, () => ledger.reserve(account, 3, { operation: "search" }).pipe(Effect.result)),
        { concurrency: "unbounded" }
      )
    ))
    expect(results.filter(Result.isSuccess).length).toBe(16)
    const state = await expectBalanced(account)
    expect(state.monthly + state.topup).toBe(2)
    expect(state.pendingHolds).toBe(16)
    // Settle half, refund the others, concurrently.
    const holds = results.filter(Result.isSuccess).map((r) => r.success)
    await run(Effect.flatMap(Ledger, (ledger) =>
      Effect.all(holds.map((hold, i) => (i % 2 === 0 ? ledger.settle(hold.id, 1) : ledger.refund(hold.id))), {
        concurrency: "unbounded"
      })
    ))
    const after = await expectBalanced(account)
    expect(after.monthly + after.topup).toBe(50 - 8)
    expect(after.pendingHolds).toBe(0)
  })
})

describe("property: random grant/reserve/settle/refund sequences agree with a simple model", () => {
  type Step =
    | { readonly kind: "grant"; readonly bucket: "monthly" | "topup"; readonly amount: number }
    | { readonly kind: "reserve"; readonly amount: number }
    | { readonly kind: "settle"; readonly pick: number; readonly fraction: number }
    | { readonly kind: "refund"; readonly pick: number }

  const step: fc.Arbitrary<Step> = fc.oneof(
    fc.record({ kind: fc.constant("grant" as const), bucket: fc.constantFrom("monthly" as const, "topup" as const), amount: fc.integer({ min: 1, max: 30 }) }),
    fc.record({ kind: fc.constant("reserve" as const), amount: fc.integer({ min: 1, max: 25 }) }),
    fc.record({ kind: fc.constant("settle" as const), pick: fc.nat(), fraction: fc.double({ min: 0, max: 1, noNaN: true }) }),
    fc.record({ kind: fc.constant("refund" as const), pick: fc.nat() })
  )

  test("balances, holds and journal sums", async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 20 }), fc.array(step, { maxLength: 25 }), async (m0, t0, steps) => {
        const account = await newAccount(m0, t0)
        const model = { monthly: m0, topup: t0 }
        const open: Array<{ id: string; monthly: number; topup: number }> = []
        for (const s of steps) {
          if (s.kind === "grant") {
            await run(Effect.flatMap(Ledger, (ledger) => ledger.grant(account, s.bucket, s.amount, {})))
            model[s.bucket] += s.amount
          } else if (s.kind === "reserve") {
            const result = await reserve(account, s.amount)
            if (model.monthly + model.topup >= s.amount) {
              expect(Result.isSuccess(result)).toBe(true)
              const fromMonthly = Math.min(model.monthly, s.amount)
              model.monthly -= fromMonthly
              model.topup -= s.amount - fromMonthly
              if (Result.isSuccess(result)) open.push({ id: result.success.id, monthly: fromMonthly, topup: s.amount - fromMonthly })
            } else {
              expect(Result.isFailure(result)).toBe(true)
            }
          } else if (open.length > 0) {
            const [hold] = open.splice(s.pick % open.length, 1)
            const total = hold.monthly + hold.topup
            const charge = s.kind === "settle" ? Math.floor(total * s.fraction) : 0
            const resolved = await run(Effect.flatMap(Ledger, (ledger) =>
              s.kind === "settle" ? ledger.settle(hold.id, charge) : ledger.refund(hold.id)
            ))
            expect(Option.getOrThrow(resolved).charged).toBe(charge)
            const chargedMonthly = Math.min(hold.monthly, charge)
            model.monthly += hold.monthly - chargedMonthly
            model.topup += hold.topup - (charge - chargedMonthly)
          }
        }
        const state = await expectBalanced(account)
        expect({ monthly: state.monthly, topup: state.topup }).toEqual(model)
        expect(state.pendingHolds).toBe(open.length)
      }),
      { numRuns: 40 }
    )
  })
})
