/**
 * The Ledger's contract, on both repositories: one list of cases, each run by the Ledger service
 * over the PostgreSQL LedgerRepo (a database of this file's own, and the embedded PGlite of a
 * temporary data directory, both migrated) and over the in-memory twin (src/Ledger/RepoMemory.ts),
 * with TestClock as the clock of all, and the same assertions.
 * Monthly credits are spent first, a refund goes back top-up first, a period that ended rolls
 * over before anything is read or taken, monthly credits held across a rollover expire, and holds
 * left pending past their timeout are voided by the sweep. After every case each account's
 * balances equal the sum of its journal rows.
 *
 * The PostgreSQL database is shared by the cases, so each case opens accounts of its own and
 * asserts only on them (a sweep may also touch an earlier case's wallets).
 */
import { describe, expect, test } from "bun:test"
import { Context, Duration, Effect, Exit, Layer, Option, References } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import fc from "fast-check"
import { AccountsRepo } from "../src/Admin/Repo.js"
import { makeAccountsRepoInMemory } from "../src/Admin/RepoMemory.js"
import { newId } from "../src/Ids.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { LedgerRepo } from "../src/Ledger/Repo.js"
import { makeLedgerRepoInMemory } from "../src/Ledger/RepoMemory.js"
import { fileDatabase } from "./support/fileDatabase.js"

/** A journal row as both repositories show it. */
interface JournalEntry {
  readonly entryType: string
  readonly bucket: string
  readonly amount: number
  readonly operation: string | null
  readonly reason: string | null
  readonly holdId: string | null
  readonly referenceId: string | null
  readonly grantId: string | null
}

/** Reads an account's journal, in the order it was written. */
class Journal extends Context.Service<Journal, { readonly rows: (accountId: string) => Effect.Effect<ReadonlyArray<JournalEntry>> }>()(
  "test/Journal"
) {}

type Services = Ledger | AccountsRepo | Journal

const start = Date.UTC(2026, 0, 15, 12)

const postgres = fileDatabase(Layer.mergeAll(AccountsRepo.layer, LedgerRepo.layer))
const embedded = fileDatabase(Layer.mergeAll(AccountsRepo.layer, LedgerRepo.layer), { embedded: true })

/** Runs `body` on a SQL database's runtime: the Ledger built on its repository, its journal read by SQL. */
const onSql = (database: typeof postgres) => <A, E>(body: Effect.Effect<A, E, Services>) =>
  database.run(Effect.exit(withClock(body).pipe(
    Effect.provide(Layer.mergeAll(Layer.orDie(Ledger.layerWithoutDependencies), postgresJournal)),
    Effect.provide(Layer.succeed(References.MinimumLogLevel, "Error"))
  )))

const postgresJournal = Layer.effect(
  Journal,
  Effect.map(SqlClient.SqlClient, (sql) => ({
    rows: (accountId: string) =>
      sql<JournalEntry>`
        SELECT entry_type AS "entryType", bucket, amount::int AS amount, operation, reason, hold_id AS "holdId",
               reference_id AS "referenceId", grant_id AS "grantId"
          FROM credit_journal WHERE account_id = ${accountId} ORDER BY seq`.pipe(Effect.orDie)
  }))
)

/** Runs `body` with TestClock set to `start`, the Ledger built on the backend's repository. */
const withClock = <A, E>(body: Effect.Effect<A, E, Services>) =>
  TestClock.setTime(start).pipe(Effect.andThen(body), Effect.provide(TestClock.layer()))

const backends: ReadonlyArray<{
  readonly name: string
  readonly run: <A, E>(body: Effect.Effect<A, E, Services>) => Promise<Exit.Exit<A, E>>
}> = [
  { name: "PostgreSQL", run: onSql(postgres) },
  { name: "embedded PostgreSQL (PGlite)", run: onSql(embedded) },
  {
    name: "memory",
    run: (body) => {
      const accounts = makeAccountsRepoInMemory()
      const ledger = makeLedgerRepoInMemory()
      const journal = Layer.succeed(Journal, {
        rows: (accountId: string) =>
          Effect.sync(() =>
            ledger.state.journal.filter((row) => row.accountId === accountId).map((row) => ({
              entryType: row.entryType,
              bucket: row.bucket,
              amount: row.amount,
              operation: row.operation,
              reason: row.reason,
              holdId: row.holdId,
              referenceId: row.referenceId,
              grantId: row.grantId
            }))
          )
      })
      return Effect.runPromise(Effect.exit(withClock(body).pipe(
        Effect.provide(Layer.mergeAll(Layer.orDie(Ledger.layerWithoutDependencies).pipe(Layer.provide(ledger.layer)), accounts.layer, journal)),
        Effect.provide(Layer.succeed(References.MinimumLogLevel, "Error"))
      )))
    }
  }
]

const success = <A, E>(exit: Exit.Exit<A, E>): A => {
  if (Exit.isFailure(exit)) throw new Error(`expected success, got ${String(exit.cause)}`)
  return exit.value
}

/** A new account on plan pro with its wallet and opening balances, as the admin opens one. */
const open = (opening: { readonly monthlyGrant: number; readonly monthlyBalance: number; readonly topupBalance: number }) =>
  Effect.gen(function*() {
    const accountId = newId("acct")
    yield* (yield* AccountsRepo).insertAccount({ id: accountId, name: null, plan: "pro", monthlyGrant: opening.monthlyGrant })
    yield* (yield* Ledger).openWallet(accountId, opening)
    return accountId
  })

/** Runs one case on `backend`: a new account opened with `opening`, then `body`; answers its result. */
const inCase = <A, E>(
  backend: (typeof backends)[number],
  opening: Parameters<typeof open>[0],
  body: (ledger: Ledger["Service"], account: string) => Effect.Effect<A, E, Services>
) => backend.run(Effect.flatMap(Effect.zip(Ledger, open(opening)), ([ledger, account]) => body(ledger, account))).then(success)

/** The account's journal, and its wallet against the journal's sums: they must agree. */
const audit = (accountId: string) =>
  Effect.gen(function*() {
    // The wallet first: reading it applies a rollover or expiry that is due, journaled.
    const wallet = yield* (yield* Ledger).wallet(accountId)
    const rows = yield* (yield* Journal).rows(accountId)
    const sum = (bucket: string) => rows.filter((row) => row.bucket === bucket).reduce((total, row) => total + row.amount, 0)
    return { rows, wallet, sums: { monthly: sum("monthly"), topup: sum("topup") } }
  })

const expectBalanced = (audited: { readonly wallet: { readonly monthly: number; readonly topup: number }; readonly sums: { readonly monthly: number; readonly topup: number } }) =>
  expect({ monthly: audited.wallet.monthly, topup: audited.wallet.topup }).toEqual(audited.sums)

/** The rows a hold wrote after its reserve, as [type, bucket, amount]. */
const afterReserve = (rows: ReadonlyArray<JournalEntry>, holdId: string) =>
  rows.filter((row) => row.holdId === holdId && row.entryType !== "reserve").map((row) => [row.entryType, row.bucket, row.amount])

for (const backend of backends) {
  describe(`the Ledger's contract: ${backend.name}`, () => {
    test("a reserve takes monthly credits first, then top-up", async () => {
      const { audited, hold } = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 }, (ledger, account) =>
        Effect.gen(function*() {
          const hold = yield* ledger.reserve(account, 8, { operation: "search" })
          return { hold, audited: yield* audit(account) }
        }))
      expect(hold.balancesAfter).toEqual({ monthly: 0, topup: 7 })
      expect(audited.wallet).toMatchObject({ monthly: 0, topup: 7 })
      expect(audited.rows.filter((row) => row.entryType === "reserve").map((row) => [row.bucket, row.amount])).toEqual([
        ["monthly", -5],
        ["topup", -3]
      ])
      expectBalanced(audited)
    })

    test("a refund gives each credit back where it came from; a settle posts monthly first and releases top-up first", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 }, (ledger, account) =>
        Effect.gen(function*() {
          const refundedHold = yield* ledger.reserve(account, 8, { operation: "search" })
          const refunded = yield* ledger.refund(refundedHold.id)
          const settledHold = yield* ledger.reserve(account, 8, { operation: "search" })
          const settled = yield* ledger.settle(settledHold.id, 6)
          const again = yield* ledger.refund(settledHold.id)
          return { refunded, settled, again, refundedHold, settledHold, audited: yield* audit(account) }
        }))
      expect(Option.getOrThrow(outcome.refunded)).toEqual({ charged: 0, balancesAfter: { monthly: 5, topup: 10 } })
      // 6 of the 8 held (5 monthly, 3 top-up) are posted: all 5 monthly and 1 top-up; 2 top-up come back.
      expect(Option.getOrThrow(outcome.settled)).toEqual({ charged: 6, balancesAfter: { monthly: 0, topup: 9 } })
      expect(Option.isNone(outcome.again)).toBe(true)
      expect(afterReserve(outcome.audited.rows, outcome.refundedHold.id)).toEqual([["release", "topup", 3], ["release", "monthly", 5]])
      expect(afterReserve(outcome.audited.rows, outcome.settledHold.id)).toEqual([["release", "topup", 2]])
      expectBalanced(outcome.audited)
    })

    test("short: the reserve is refused with InsufficientCredits and nothing changes", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 1, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          return { refused: yield* Effect.flip(ledger.reserve(account, 2, { operation: "search" })), audited: yield* audit(account) }
        }))
      expect(outcome.refused._tag).toBe("InsufficientCredits")
      expect(outcome.audited.wallet).toMatchObject({ monthly: 1, topup: 0 })
      expect(outcome.audited.rows.filter((row) => row.entryType === "reserve")).toEqual([])
      expectBalanced(outcome.audited)
    })

    test("at the period end the next debit rolls over first: unused monthly credits expire, the grant is credited", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 40, topupBalance: 10 }, (ledger, account) =>
        Effect.gen(function*() {
          const opened = yield* ledger.wallet(account)
          yield* TestClock.adjust("32 days")
          const hold = yield* ledger.reserve(account, 3, { operation: "search" })
          return { opened, hold, audited: yield* audit(account) }
        }))
      expect(outcome.opened.periodEnd?.toISOString()).toBe("2026-02-15T12:00:00.000Z")
      expect(outcome.hold.balancesAfter).toEqual({ monthly: 97, topup: 10 })
      // The new period ends one month after the last end: the anchor's day, not the rollover's.
      expect(outcome.audited.wallet.periodEnd?.toISOString()).toBe("2026-03-15T12:00:00.000Z")
      expect(outcome.audited.rows.filter((row) => row.operation === "rollover").map((row) => [row.entryType, row.amount, row.reason]))
        .toEqual([["expire", -40, "monthly period ended"], ["grant", 100, "monthly grant"]])
      expectBalanced(outcome.audited)
    })

    test("the period end is exact: a millisecond before it nothing rolls over, at it the wallet read rolls over", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 100, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          yield* ledger.charge(account, 30, { operation: "hook" })
          yield* TestClock.setTime(Date.UTC(2026, 1, 15, 12) - 1)
          const before = yield* ledger.wallet(account)
          yield* TestClock.adjust("1 millis")
          const at = yield* ledger.wallet(account)
          return { before, at, audited: yield* audit(account) }
        }))
      expect(outcome.before).toMatchObject({ monthly: 70, periodEnd: new Date("2026-02-15T12:00:00.000Z") })
      expect(outcome.at).toMatchObject({ monthly: 100, periodEnd: new Date("2026-03-15T12:00:00.000Z") })
      expectBalanced(outcome.audited)
    })

    test("the sweep's rollover moves every wallet whose period ended, however many periods it missed", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 60, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          yield* TestClock.adjust("95 days")
          yield* ledger.rollover(null)
          return yield* audit(account)
        }))
      // Jan 15 + 95 days is Apr 20: three ends passed (Feb, Mar, Apr 15), one rollover, the next end May 15.
      expect(outcome.wallet).toMatchObject({ monthly: 100, periodEnd: new Date("2026-05-15T12:00:00.000Z") })
      expect(outcome.rows.filter((row) => row.operation === "rollover").map((row) => [row.entryType, row.amount]))
        .toEqual([["expire", -60], ["grant", 100]])
      expectBalanced(outcome)
    })

    test("a grant after the period ended rolls over first, so it lands in the new period", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 100, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          yield* TestClock.adjust("31 days")
          return { granted: yield* ledger.grant(account, "monthly", 5, { reason: "goodwill" }), audited: yield* audit(account) }
        }))
      expect(outcome.granted).toMatchObject({ monthly: 105, topup: 0 })
      expectBalanced(outcome.audited)
    })

    test("monthly credits held across a rollover expire when the hold is resolved; top-up comes back", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 }, (ledger, account) =>
        Effect.gen(function*() {
          const hold = yield* ledger.reserve(account, 8, { operation: "prediction", expires: false })
          yield* TestClock.adjust("31 days")
          yield* ledger.wallet(account)
          const refunded = yield* ledger.refund(hold.id)
          return { hold, refunded, audited: yield* audit(account) }
        }))
      expect(Option.getOrThrow(outcome.refunded).balancesAfter).toEqual({ monthly: 100, topup: 10 })
      expect(afterReserve(outcome.audited.rows, outcome.hold.id)).toEqual([
        ["release", "topup", 3],
        ["release", "monthly", 5],
        ["expire", "monthly", -5]
      ])
      expectBalanced(outcome.audited)
    })

    test("a grant's reference credits once; the same reference with another amount is refused", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          const details = { referenceId: "inv_1" }
          yield* ledger.grant(account, "topup", 50, details)
          const repeat = yield* ledger.grant(account, "topup", 50, details)
          const conflict = yield* Effect.flip(ledger.grant(account, "topup", 60, details))
          return { repeat, conflict, audited: yield* audit(account) }
        }))
      expect(outcome.repeat.topup).toBe(50)
      expect(outcome.conflict._tag).toBe("ValidationFailed")
      expect(outcome.audited.rows.map((row) => [row.entryType, row.amount])).toEqual([["grant", 50]])
      expectBalanced(outcome.audited)
    })

    test("a plan change starts a new period now: unused monthly credits expire, the new grant is credited", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 100, monthlyBalance: 100, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          yield* ledger.charge(account, 10, { operation: "hook" })
          yield* TestClock.adjust("10 days")
          yield* (yield* AccountsRepo).changePlan(account, "business", 1000)
          yield* ledger.startNewPeriod(account, 1000)
          return yield* audit(account)
        }))
      expect(outcome.wallet).toMatchObject({ monthly: 1000, periodEnd: new Date("2026-02-25T12:00:00.000Z") })
      expect(outcome.rows.filter((row) => row.operation === "rollover").map((row) => [row.entryType, row.amount, row.reason]))
        .toEqual([["expire", -90, "plan changed"], ["grant", 1000, "plan changed"]])
      expectBalanced(outcome)
    })

    test("a hold left pending past HOLD_TIMEOUT is voided by the sweep, its credits back; not a moment before", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 10 }, (ledger, account) =>
        Effect.gen(function*() {
          const hold = yield* ledger.reserve(account, 2, { operation: "search" })
          const prediction = yield* ledger.reserve(account, 3, { operation: "prediction", expires: false })
          yield* TestClock.setTime(start + Duration.toMillis(ledger.config.holdTimeout) - 1)
          yield* ledger.voidExpiredHolds
          const early = yield* audit(account)
          yield* TestClock.adjust("1 millis")
          yield* ledger.voidExpiredHolds
          return { hold, prediction, early, late: yield* audit(account), again: yield* ledger.settle(hold.id, 1) }
        }))
      expect(outcome.early.wallet.topup).toBe(5)
      expect(afterReserve(outcome.early.rows, outcome.hold.id)).toEqual([])
      // Voided: the 2 come back; the prediction's hold has no timeout and stays.
      expect(outcome.late.wallet.topup).toBe(7)
      expect(afterReserve(outcome.late.rows, outcome.hold.id)).toEqual([["release", "topup", 2]])
      expect(afterReserve(outcome.late.rows, outcome.prediction.id)).toEqual([])
      expect(Option.isNone(outcome.again)).toBe(true)
      expectBalanced(outcome.late)
    })
  })
}

const day = 24 * 60 * 60 * 1000

/** A top-up grant of `amount` expiring `days` after `start` (null: never); the clock moves 1 ms, so grants' ages differ. */
const topup = (ledger: Ledger["Service"], account: string, amount: number, days: number | null) =>
  Effect.andThen(
    ledger.grant(account, "topup", amount, { expiresAt: days === null ? null : new Date(start + days * day) }),
    TestClock.adjust("1 millis")
  )

/** The live grants, as [amount, remaining, days to expiry from start or null], in spending order. */
const liveGrants = (ledger: Ledger["Service"], account: string) =>
  Effect.map(ledger.topupGrants(account, 100), ({ grants }) =>
    grants.map((grant) => [grant.amount, grant.remaining, grant.expiresAt === null ? null : (grant.expiresAt.getTime() - start) / day]))

for (const backend of backends) {
  describe(`the Ledger's contract, top-up grants: ${backend.name}`, () => {
    const opening = { monthlyGrant: 0, monthlyBalance: 5, topupBalance: 0 }

    test("spending takes monthly first, then grants soonest-expiring first, never-expiring last; a refund goes back to each grant", async () => {
      const outcome = await inCase(backend, opening, (ledger, account) =>
        Effect.gen(function*() {
          yield* topup(ledger, account, 10, 30)
          yield* topup(ledger, account, 10, null)
          yield* topup(ledger, account, 10, 10)
          yield* topup(ledger, account, 10, 20)
          const hold = yield* ledger.reserve(account, 30, { operation: "search" })
          const held = yield* liveGrants(ledger, account)
          yield* ledger.refund(hold.id)
          const refunded = yield* liveGrants(ledger, account)
          const partial = yield* ledger.reserve(account, 25, { operation: "search" })
          // 12 charged: the 5 monthly, then 7 of the first grant taken; 13 back, to the last taken first.
          yield* ledger.settle(partial.id, 12)
          return { hold, held, refunded, settled: yield* liveGrants(ledger, account), audited: yield* audit(account) }
        }))
      expect(outcome.hold.balancesAfter).toEqual({ monthly: 0, topup: 15 })
      expect(outcome.held).toEqual([[10, 5, 30], [10, 10, null]])
      expect(outcome.refunded).toEqual([[10, 10, 10], [10, 10, 20], [10, 10, 30], [10, 10, null]])
      expect(outcome.settled).toEqual([[10, 3, 10], [10, 10, 20], [10, 10, 30], [10, 10, null]])
      expect(outcome.audited.wallet).toMatchObject({ monthly: 0, topup: 33 })
      expectBalanced(outcome.audited)
    })

    test("at expires_at what is left of a grant leaves through an expire row: not a millisecond before, once", async () => {
      const outcome = await inCase(backend, opening, (ledger, account) =>
        Effect.gen(function*() {
          yield* topup(ledger, account, 10, 1)
          yield* topup(ledger, account, 4, null)
          yield* ledger.charge(account, 8, { operation: "hook" })
          yield* TestClock.setTime(start + day - 1)
          yield* ledger.expireDueGrants
          const before = yield* audit(account)
          yield* TestClock.setTime(start + day)
          const swept = yield* ledger.expireDueGrants
          const again = yield* ledger.expireDueGrants
          return { before, swept, again, grants: yield* liveGrants(ledger, account), audited: yield* audit(account) }
        }))
      expect(outcome.before.wallet.topup).toBe(11)
      expect(outcome.swept).toBeGreaterThanOrEqual(1)
      expect(outcome.again).toBe(0)
      expect(outcome.grants).toEqual([[4, 4, null]])
      const expiries = outcome.audited.rows.filter((row) => row.entryType === "expire")
      expect(expiries.map((row) => [row.bucket, row.amount, row.operation, row.reason])).toEqual([["topup", -7, "admin", "top-up grant expired"]])
      expect(expiries[0].referenceId).toBe(expiries[0].grantId)
      expect(outcome.audited.wallet).toMatchObject({ monthly: 0, topup: 4 })
      expectBalanced(outcome.audited)
    })

    test("a grant past expires_at is expired before the next read or debit, with no sweep; the debit spends the rest", async () => {
      const outcome = await inCase(backend, opening, (ledger, account) =>
        Effect.gen(function*() {
          yield* topup(ledger, account, 10, 1)
          yield* topup(ledger, account, 6, 2)
          yield* TestClock.setTime(start + day)
          const hold = yield* ledger.reserve(account, 8, { operation: "search" })
          const short = yield* Effect.flip(ledger.reserve(account, 4, { operation: "search" }))
          return { hold, short, grants: yield* liveGrants(ledger, account), audited: yield* audit(account) }
        }))
      expect(outcome.hold.balancesAfter).toEqual({ monthly: 0, topup: 3 })
      expect(outcome.short._tag).toBe("InsufficientCredits")
      expect(outcome.grants).toEqual([[6, 3, 2]])
      expect(outcome.audited.rows.filter((row) => row.entryType === "expire").map((row) => row.amount)).toEqual([-10])
      expectBalanced(outcome.audited)
    })

    test("credits held when their grant expires expire with it when the hold gives them back", async () => {
      const outcome = await inCase(backend, opening, (ledger, account) =>
        Effect.gen(function*() {
          yield* topup(ledger, account, 10, 1)
          yield* topup(ledger, account, 10, null)
          const hold = yield* ledger.reserve(account, 12, { operation: "prediction", expires: false })
          yield* TestClock.setTime(start + 2 * day)
          yield* ledger.expireDueGrants
          const refunded = yield* ledger.refund(hold.id)
          return { hold, refunded, grants: yield* liveGrants(ledger, account), audited: yield* audit(account) }
        }))
      // Held: 5 monthly and 7 of the expiring grant. Back: the 7 expire at once, the 5 monthly return.
      expect(Option.getOrThrow(outcome.refunded).balancesAfter).toEqual({ monthly: 5, topup: 10 })
      expect(outcome.audited.rows.filter((row) => row.holdId === outcome.hold.id && row.entryType !== "reserve")
        .map((row) => [row.entryType, row.bucket, row.amount, row.reason])).toEqual([
          ["release", "topup", 7, null],
          ["expire", "topup", -7, "top-up grant expired while held"],
          ["release", "monthly", 5, null]
        ])
      expect(outcome.grants).toEqual([[10, 10, null]])
      expectBalanced(outcome.audited)
    })

    test("an expiry must be in the future and only on a top-up grant; a reference repeats only with the same expiry", async () => {
      const outcome = await inCase(backend, opening, (ledger, account) =>
        Effect.gen(function*() {
          const now = Effect.flip(ledger.grant(account, "topup", 5, { expiresAt: new Date(start) }))
          const monthly = Effect.flip(ledger.grant(account, "monthly", 5, { expiresAt: new Date(start + day) }))
          const details = { referenceId: "inv_7", expiresAt: new Date(start + day) }
          yield* ledger.grant(account, "topup", 5, details)
          const repeat = yield* ledger.grant(account, "topup", 5, details)
          const otherExpiry = yield* Effect.flip(ledger.grant(account, "topup", 5, { ...details, expiresAt: null }))
          return { now: yield* now, monthly: yield* monthly, repeat, otherExpiry, audited: yield* audit(account) }
        }))
      expect([outcome.now._tag, outcome.monthly._tag, outcome.otherExpiry._tag]).toEqual(["ValidationFailed", "ValidationFailed", "ValidationFailed"])
      expect(outcome.now.message).toBe("expires_at: must be in the future.")
      expect(outcome.repeat.topup).toBe(5)
      expect(outcome.audited.rows.filter((row) => row.entryType === "grant" && row.bucket === "topup").map((row) => row.amount)).toEqual([5])
      expectBalanced(outcome.audited)
    })

    test("concurrent reserves on grants never overdraw: exactly the credits there were are taken", async () => {
      const outcome = await inCase(backend, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 0 }, (ledger, account) =>
        Effect.gen(function*() {
          yield* topup(ledger, account, 7, 3)
          yield* topup(ledger, account, 7, null)
          yield* topup(ledger, account, 6, 1)
          const attempts = yield* Effect.all(
            Array.from({ length: 30 }, () => Effect.result(ledger.reserve(account, 1, { operation: "search" }))),
            { concurrency: "unbounded" }
          )
          const taken = attempts.filter((attempt) => attempt._tag === "Success")
          const drained = yield* liveGrants(ledger, account)
          yield* Effect.forEach(taken, (attempt) => ledger.refund(attempt.success.id), { concurrency: "unbounded", discard: true })
          return { taken: taken.length, drained, restored: yield* liveGrants(ledger, account), audited: yield* audit(account) }
        }))
      expect(outcome.taken).toBe(20)
      expect(outcome.drained).toEqual([])
      expect(outcome.restored).toEqual([[6, 6, 1], [7, 7, 3], [7, 7, null]])
      expectBalanced(outcome.audited)
    })
  })
}

/** One step of the property below. */
type Step =
  | { readonly kind: "grant"; readonly amount: number; readonly days: number | null }
  | { readonly kind: "reserve"; readonly amount: number }
  | { readonly kind: "settle"; readonly hold: number; readonly share: number }
  | { readonly kind: "refund"; readonly hold: number }
  | { readonly kind: "advance"; readonly hours: number }
  | { readonly kind: "sweep" }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant("grant" as const), amount: fc.integer({ min: 1, max: 20 }), days: fc.option(fc.integer({ min: 1, max: 4 })) }),
  fc.record({ kind: fc.constant("reserve" as const), amount: fc.integer({ min: 1, max: 15 }) }),
  fc.record({ kind: fc.constant("settle" as const), hold: fc.nat(), share: fc.double({ min: 0, max: 1, noNaN: true }) }),
  fc.record({ kind: fc.constant("refund" as const), hold: fc.nat() }),
  fc.record({ kind: fc.constant("advance" as const), hours: fc.integer({ min: 1, max: 60 }) }),
  fc.record({ kind: fc.constant("sweep" as const) })
)

/**
 * The rules as a plain model, to check both repositories against: monthly first, then grants
 * soonest-expiring first (never-expiring last, then oldest); a release back to the grants taken
 * last first, or lost with a grant past its expiry; due grants emptied before a read or debit.
 */
const modelOf = (monthly: number) => {
  const model = {
    now: start,
    monthly,
    grants: [] as Array<{ amount: number; remaining: number; expiresAt: number | null; createdAt: number; expired: boolean }>,
    holds: [] as Array<{ id: string; monthly: number; takes: Array<readonly [number, number]>; pending: boolean }>
  }
  const live = (at: number) => (grant: (typeof model.grants)[number]) => !grant.expired && (grant.expiresAt === null || grant.expiresAt > at)
  const expire = () => model.grants.filter((grant) => !grant.expired && !live(model.now)(grant)).forEach((grant) => {
    grant.remaining = 0
    grant.expired = true
  })
  const order = () =>
    model.grants.map((grant, index) => ({ grant, index })).sort((a, b) =>
      (a.grant.expiresAt ?? Infinity) - (b.grant.expiresAt ?? Infinity) || a.grant.createdAt - b.grant.createdAt
    )
  const reserve = (id: string, amount: number) => {
    const fromMonthly = Math.min(model.monthly, amount)
    model.monthly -= fromMonthly
    let left = amount - fromMonthly
    const takes: Array<readonly [number, number]> = []
    for (const { grant, index } of order().filter(({ grant }) => live(model.now)(grant))) {
      const n = Math.min(grant.remaining, left)
      if (n === 0) continue
      grant.remaining -= n
      left -= n
      takes.push([index, n])
    }
    model.holds.push({ id, monthly: fromMonthly, takes, pending: true })
  }
  const resolve = (hold: (typeof model.holds)[number], charge: number) => {
    hold.pending = false
    const postedMonthly = Math.min(hold.monthly, charge)
    model.monthly += hold.monthly - postedMonthly
    let left = hold.takes.reduce((total, [, n]) => total + n, 0) - (charge - postedMonthly)
    for (const [index, n] of [...hold.takes].reverse()) {
      const back = Math.min(n, left)
      left -= back
      if (live(model.now)(model.grants[index])) model.grants[index].remaining += back
    }
  }
  const available = () => model.monthly + model.grants.filter(live(model.now)).reduce((total, grant) => total + grant.remaining, 0)
  const shown = () =>
    order().filter(({ grant }) => !grant.expired && grant.remaining > 0).map(({ grant }) => [
      grant.amount, grant.remaining, grant.expiresAt === null ? null : (grant.expiresAt - start) / day
    ])
  return { model, expire, reserve, resolve, available, shown }
}

/** Runs `steps` on the Ledger and on the model; answers what each shows at the end, and the audit. */
const runSteps = (ledger: Ledger["Service"], account: string, steps: ReadonlyArray<Step>) =>
  Effect.gen(function*() {
    const { available, expire, model, reserve, resolve, shown } = modelOf(5)
    for (const s of steps) {
      const hold = model.holds.filter((candidate) => candidate.pending)[s.kind === "settle" || s.kind === "refund" ? s.hold % 8 : 0]
      if (s.kind === "grant") {
        const expiresAt = s.days === null ? null : model.now + s.days * day
        yield* ledger.grant(account, "topup", s.amount, { expiresAt: expiresAt === null ? null : new Date(expiresAt) })
        model.grants.push({ amount: s.amount, remaining: s.amount, expiresAt, createdAt: model.now, expired: false })
        yield* TestClock.adjust("1 millis")
        model.now += 1
      } else if (s.kind === "reserve") {
        expire()
        const short = available() < s.amount
        const outcome = yield* Effect.result(ledger.reserve(account, s.amount, { operation: "prediction", expires: false }))
        expect(outcome._tag).toBe(short ? "Failure" : "Success")
        if (outcome._tag === "Success") reserve(outcome.success.id, s.amount)
      } else if (s.kind === "settle" && hold !== undefined) {
        const amount = hold.monthly + hold.takes.reduce((total, [, n]) => total + n, 0)
        const charge = Math.floor(s.share * amount)
        expect(Option.isSome(yield* ledger.settle(hold.id, charge))).toBe(true)
        resolve(hold, charge)
      } else if (s.kind === "refund" && hold !== undefined) {
        expect(Option.isSome(yield* ledger.refund(hold.id))).toBe(true)
        resolve(hold, 0)
      } else if (s.kind === "advance") {
        yield* TestClock.adjust(`${s.hours} hours`)
        model.now += s.hours * 60 * 60 * 1000
      } else if (s.kind === "sweep") {
        yield* ledger.expireDueGrants
        expire()
      }
    }
    const audited = yield* audit(account)
    expire()
    return { audited, grants: yield* liveGrants(ledger, account), expected: { monthly: model.monthly, grants: shown() } }
  })

for (const backend of backends) {
  describe(`the Ledger's contract, a property: ${backend.name}`, () => {
    test("random grants, debits, settles, refunds, expiries and clock moves: the model's balances and grants, balance == sum(journal)", async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 24 }), async (steps) => {
          const outcome = await inCase(backend, { monthlyGrant: 0, monthlyBalance: 5, topupBalance: 0 }, (ledger, account) =>
            runSteps(ledger, account, steps))
          expect(outcome.grants).toEqual(outcome.expected.grants)
          expect(outcome.audited.wallet.monthly).toBe(outcome.expected.monthly)
          expect(outcome.audited.wallet.topup).toBe(outcome.expected.grants.reduce((total, grant) => total + Number(grant[1]), 0))
          expectBalanced(outcome.audited)
        }),
        { numRuns: backend.name === "memory" ? 150 : backend.name === "PostgreSQL" ? 25 : 10 }
      )
    }, 240_000)
  })
}
