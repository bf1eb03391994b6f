/**
 * The Ledger service alone: `Ledger.layer` (with its repository) on a real, migrated
 * PostgreSQL database, no HTTP server and no other service. Races are run on purpose, and after
 * each one no credit may have been created or lost:
 * - for every account and bucket, balance == sum(journal);
 * - grants - expiries - charges (settled holds and charges taken at once) == balances + credits still held.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer, ManagedRuntime, Option, References, Result } from "effect"
import type Pg from "pg"
import { newId } from "../src/Ids.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { SqlLive } from "../src/Sql.js"
import { createDatabase, dropDatabase, ledgerState, testPool } from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

const ledgerLayer = (databaseUrl: string) => {
  const provider = ConfigProvider.fromEnv({
    env: { DATABASE_URL: databaseUrl, DATA_DIR: tempDir("hookline-ledger-") }
  })
  return Ledger.layer.pipe(
    Layer.provide(SqlLive),
    Layer.provideMerge(Layer.succeed(References.MinimumLogLevel, "Error")),
    Layer.provide(ConfigProvider.layer(provider))
  )
}

let databaseUrl: string
let runtime: ManagedRuntime.ManagedRuntime<Ledger, unknown>
let db: Pg.Pool

beforeAll(async () => {
  databaseUrl = await createDatabase()
  runtime = ManagedRuntime.make(ledgerLayer(databaseUrl))
  await runtime.runPromise(Effect.void)
  db = testPool(databaseUrl, 4)
})
afterAll(async () => {
  await runtime.dispose()
  await db.end()
  await dropDatabase(databaseUrl)
})

const withLedger = <A, E>(body: (ledger: Ledger["Service"]) => Effect.Effect<A, E>) => runtime.runPromise(Effect.flatMap(Ledger, body))

/** An account (pro, 1,000 a month) and its wallet opened by the Ledger with these balances. */
const openAccount = async (monthly: number, topup: number) => {
  const accountId = newId("acct")
  await db.query("INSERT INTO accounts (id, plan, monthly_grant) VALUES ($1, 'pro', 1000)", [accountId])
  await withLedger((ledger) => ledger.openWallet(accountId, { monthlyGrant: 1_000, monthlyBalance: monthly, topupBalance: topup }))
  return accountId
}

/** balance == sum(journal) per bucket, and every credit accounted for; returns the state. */
const expectConserved = async (accountId: string) => {
  const state = await ledgerState(db, accountId)
  expect(state.monthly).toBe(state.journalMonthly)
  expect(state.topup).toBe(state.journalTopup)
  const { rows: [flows] } = await db.query<{ granted: number; expired: number; charged: number; held: number }>(
    `SELECT (SELECT COALESCE(sum(amount), 0) FROM credit_journal WHERE account_id = $1 AND entry_type = 'grant')::int AS granted,
            (SELECT COALESCE(-sum(amount), 0) FROM credit_journal WHERE account_id = $1 AND entry_type = 'expire')::int AS expired,
            (SELECT COALESCE(sum(settled_monthly + settled_topup), 0) FROM holds WHERE account_id = $1 AND status = 'settled')::int
              + (SELECT COALESCE(-sum(amount), 0) FROM credit_journal WHERE account_id = $1 AND entry_type = 'reserve' AND hold_id IS NULL)::int
              AS charged,
            (SELECT COALESCE(sum(monthly_amount + topup_amount), 0) FROM holds WHERE account_id = $1 AND status = 'pending')::int AS held`,
    [accountId]
  )
  expect(flows.granted - flows.expired - flows.charged).toBe(state.monthly + state.topup + flows.held)
  return { ...state, ...flows }
}

describe("the Ledger alone on PostgreSQL", () => {
  test("60 parallel reserves of 3 against 10 credits: exactly 3 succeed and nothing is overdrawn", async () => {
    const accountId = await openAccount(4, 6)
    const results = await withLedger((ledger) =>
      Effect.all(
        Array.from({ length: 60 }, () => Effect.result(ledger.reserve(accountId, 3, { operation: "search" }))),
        { concurrency: "unbounded" }
      ))
    const won = results.filter(Result.isSuccess)
    expect(won).toHaveLength(3)
    for (const lost of results.filter(Result.isFailure)) expect(lost.failure._tag).toBe("InsufficientCredits")
    const state = await expectConserved(accountId)
    expect({ monthly: state.monthly, topup: state.topup, held: state.held, pendingHolds: state.pendingHolds })
      .toEqual({ monthly: 0, topup: 1, held: 9, pendingHolds: 3 })
  })

  test("parallel reserves and charges of mixed sizes never take more than the wallet holds", async () => {
    const accountId = await openAccount(7, 13)
    const amounts = Array.from({ length: 40 }, (_, i) => (i % 5) + 1)
    const results = await withLedger((ledger) =>
      Effect.all(
        amounts.map((amount, i) =>
          Effect.result(
            i % 2 === 0
              ? Effect.asVoid(ledger.reserve(accountId, amount, { operation: "list" }))
              : Effect.asVoid(ledger.charge(accountId, amount, { operation: "hook" }))
          ).pipe(Effect.map((result) => (Result.isSuccess(result) ? amount : 0)))),
        { concurrency: "unbounded" }
      ))
    const taken = results.reduce((sum, amount) => sum + amount, 0)
    expect(taken).toBeLessThanOrEqual(20)
    // 120 credits asked of 20: some were refused, and each refusal was real (what is left is less than
    // the largest refused amount: a refusal with enough credits left would leave at least that much).
    const refused = amounts.filter((_, i) => results[i] === 0)
    expect(refused.length).toBeGreaterThan(0)
    const state = await expectConserved(accountId)
    expect(state.monthly + state.topup).toBe(20 - taken)
    expect(state.monthly + state.topup).toBeLessThan(Math.max(...refused))
  })

  test("settle, refund and the expiry sweep racing on each hold resolve it exactly once", async () => {
    const accountId = await openAccount(100, 50)
    const holds = await withLedger((ledger) =>
      Effect.all(Array.from({ length: 15 }, () => ledger.reserve(accountId, 8, { operation: "search" })), { concurrency: 4 }))
    // Every hold is past its timeout, so the sweeper races the requests for it.
    await db.query("UPDATE holds SET expires_at = now() - interval '1 second' WHERE account_id = $1", [accountId])
    const outcomes = await withLedger((ledger) =>
      Effect.all(
        holds.map((hold, i) =>
          Effect.all([ledger.settle(hold.id, i % 9), ledger.refund(hold.id), ledger.settle(hold.id, 8), ledger.voidExpiredHolds], {
            concurrency: "unbounded"
          })),
        { concurrency: "unbounded" }
      ))
    let charged = 0
    let sweptTotal = 0
    for (const [index, [settledSome, refunded, settledAll, sweep]] of outcomes.entries()) {
      const { rows: [hold] } = await db.query<{ status: string; charged: number }>(
        "SELECT status, (settled_monthly + settled_topup)::int AS charged FROM holds WHERE id = $1",
        [holds[index].id]
      )
      const wins = [settledSome, refunded, settledAll].filter(Option.isSome)
      // One of the three calls won, unless the sweeper voided the hold first.
      expect(wins.length + (hold.status === "voided" ? 1 : 0)).toBe(1)
      sweptTotal += sweep
      if (wins.length === 1) expect(Option.getOrThrow(wins[0]).charged).toBe(hold.charged)
      charged += hold.charged
      const { rows: [resolutions] } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM credit_journal WHERE hold_id = $1 AND entry_type = 'release'",
        [holds[index].id]
      )
      expect(resolutions.n).toBeLessThanOrEqual(2) // one release per bucket, once
    }
    // Each sweep counts the holds it voided: together, every voided hold once (no other hold has expired).
    const { rows: [voided] } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM holds WHERE status = 'voided'")
    expect(sweptTotal).toBe(voided.n)
    const state = await expectConserved(accountId)
    expect(state.pendingHolds).toBe(0)
    expect(state.monthly + state.topup).toBe(150 - charged)
    expect(state.charged).toBe(charged)
  })

  test("refunds racing a monthly reset: held monthly credits never land on top of the new grant", async () => {
    const accountId = await openAccount(200, 30)
    const holds = await withLedger((ledger) =>
      Effect.all(Array.from({ length: 10 }, () => ledger.reserve(accountId, 23, { operation: "prediction", expires: false })), {
        concurrency: 4
      }))
    await db.query(
      "UPDATE wallets SET period_anchor = now() - interval '1 month 1 hour', monthly_period_end = now() - interval '1 hour' WHERE account_id = $1",
      [accountId]
    )
    await withLedger((ledger) =>
      Effect.all([ledger.rollover(null), ...holds.map((hold) => ledger.refund(hold.id)), ledger.rollover(accountId)], {
        concurrency: "unbounded"
      }))
    const state = await expectConserved(accountId)
    // Whether a refund came before the reset (its credits then expired with the period) or after
    // (they expired with the hold), the new period holds exactly its grant; top-up came back whole.
    expect({ monthly: state.monthly, topup: state.topup, pendingHolds: state.pendingHolds }).toEqual({ monthly: 1_000, topup: 30, pendingHolds: 0 })
    const { rows: [resets] } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM credit_journal WHERE account_id = $1 AND entry_type = 'grant' AND reason = 'monthly grant'",
      [accountId]
    )
    expect(resets.n).toBe(1)
  })

  test("reserves racing a monthly reset are all taken from the new period or refused", async () => {
    const accountId = await openAccount(5, 0)
    await db.query(
      "UPDATE wallets SET period_anchor = now() - interval '1 month 1 hour', monthly_period_end = now() - interval '1 hour' WHERE account_id = $1",
      [accountId]
    )
    const [results] = await withLedger((ledger) =>
      Effect.all(
        [
          Effect.all(Array.from({ length: 30 }, () => Effect.result(ledger.reserve(accountId, 40, { operation: "search" }))), {
            concurrency: "unbounded"
          }),
          ledger.rollover(null)
        ],
        { concurrency: "unbounded" }
      ))
    const reserved = results.filter(Result.isSuccess).length
    expect(reserved).toBe(25) // 1,000 / 40, the 5 old credits expired
    const state = await expectConserved(accountId)
    expect(state.monthly).toBe(0)
    expect(state.held).toBe(1_000)
  })
})
