/**
 * The in-memory repositories of accounts, API keys, wallet alerts and the credit history
 * (src/Admin/RepoMemory.ts, src/Auth/RepoMemory.ts, src/Ledger/AlertsRepoMemory.ts,
 * src/Ledger/HistoryRepoMemory.ts).
 *
 * First the contract: the same cases against the PostgreSQL repositories (on a database of this
 * file's own) and the memory ones, asserting what the services rely on, which keeps the fakes
 * honest. Then the services that hold the rules (Accounts, Auth, WalletAlerts, CreditHistory,
 * Usage) over the memory layers with TestClock and no database.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Cause, ConfigProvider, Effect, Exit, Layer, ManagedRuntime, Option, References } from "effect"
import { TestClock } from "effect/testing"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Accounts } from "../src/Admin/Accounts.js"
import { AccountsRepo } from "../src/Admin/Repo.js"
import { makeAccountsRepoInMemory, type MemoryAccountsState } from "../src/Admin/RepoMemory.js"
import { apiKeyPattern, Auth } from "../src/Auth/Auth.js"
import type { Plan } from "../src/Auth/Domain.js"
import { KeysRepo } from "../src/Auth/Repo.js"
import { makeKeysRepoInMemory } from "../src/Auth/RepoMemory.js"
import { Secrets } from "../src/Config.js"
import { newId, sha256Hex } from "../src/Ids.js"
import { WalletAlerts } from "../src/Ledger/Alerts.js"
import { KeyBudgets } from "../src/Ledger/Budgets.js"
import { AlertsRepo } from "../src/Ledger/AlertsRepo.js"
import { makeAlertsRepoInMemory } from "../src/Ledger/AlertsRepoMemory.js"
import type { Bucket, Operation } from "../src/Ledger/Domain.js"
import { CreditHistory } from "../src/Ledger/History.js"
import { HistoryRepo, type HistoryRow } from "../src/Ledger/HistoryRepo.js"
import { makeHistoryRepoInMemory } from "../src/Ledger/HistoryRepoMemory.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { LedgerRepo } from "../src/Ledger/Repo.js"
import { makeLedgerRepoInMemory, type MemoryLedgerState } from "../src/Ledger/RepoMemory.js"
import { Usage } from "../src/Ledger/Usage.js"
import { DatabaseMode, SqlLive } from "../src/Sql.js"
import { WebhooksRepo } from "../src/Webhooks/Repo.js"
import { WebhookTransport } from "../src/Webhooks/Transport.js"
import { Webhooks } from "../src/Webhooks/Webhooks.js"
import { memoryTransactions, type SaveStates } from "./support/memoryTransactions.js"
import { createDatabase, dropDatabase } from "./support/server.js"

type Repos = AccountsRepo | KeysRepo | LedgerRepo | AlertsRepo | HistoryRepo

/** Every memory repository of this file, wired as the services use them. */
const memoryRepos = () => {
  const accounts = makeAccountsRepoInMemory()
  const keys = makeKeysRepoInMemory({ accounts: accounts.state.accounts })
  const ledger = makeLedgerRepoInMemory(keys.state.keys)
  const history = makeHistoryRepoInMemory(ledger)
  const alerts = makeAlertsRepoInMemory(ledger.state)
  const layer = Layer.mergeAll(accounts.layer, keys.layer, history.ledgerLayer, history.layer, alerts.layer)
  return { accounts, keys, ledger, history, alerts, layer }
}
type MemoryRepos = ReturnType<typeof memoryRepos>

const postgresRepos = (databaseUrl: string) =>
  ManagedRuntime.make(
    Layer.mergeAll(AccountsRepo.layer, KeysRepo.layer, LedgerRepo.layer, AlertsRepo.layer, HistoryRepo.layer).pipe(
      Layer.provide(SqlLive),
      Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { DATABASE_URL: databaseUrl, PG_MAX_CONNECTIONS: "4" } })))
    )
  )

let databaseUrl: string
let postgres: ReturnType<typeof postgresRepos>

beforeAll(async () => {
  databaseUrl = await createDatabase()
  postgres = postgresRepos(databaseUrl)
  // Built (and migrated) here, not in the first test.
  await postgres.runPromise(Effect.void)
}, 60_000)
afterAll(async () => {
  await postgres.dispose()
  await dropDatabase(databaseUrl)
}, 60_000)

interface Backend {
  readonly name: string
  /** The exit of `effect`; on PostgreSQL it may also fail as the layer was built (config, migrations). */
  readonly run: <A>(effect: Effect.Effect<A, never, Repos>) => Promise<Exit.Exit<A, unknown>>
}

const backends: ReadonlyArray<Backend> = [
  { name: "PostgreSQL", run: (effect) => postgres.runPromiseExit(effect) },
  { name: "memory", run: (effect) => Effect.runPromiseExit(Effect.provide(effect, memoryRepos().layer)) }
]

const success = <A, E>(exit: Exit.Exit<A, E>): A => {
  if (Exit.isFailure(exit)) throw new Error(`expected success, got ${String(exit.cause)}`)
  return exit.value
}

const isDefect = <A, E>(exit: Exit.Exit<A, E>) => Exit.isFailure(exit) && Cause.hasDies(exit.cause)

// ---- Steps through the repositories, the same on both backends ----

const grantTo = (
  accountId: string,
  bucket: Bucket,
  amount: number,
  details: { readonly reason?: string; readonly referenceId?: string; readonly requestId?: string } = {}
) =>
  Effect.flatMap(LedgerRepo, (ledger) =>
    ledger.grant({
      accountId,
      bucket,
      amount,
      reason: details.reason ?? null,
      referenceId: details.referenceId ?? null,
      requestId: details.requestId ?? null
    }))

/** A new account and its wallet, with `monthly` and `topup` granted (journaled, as the Ledger opens wallets). */
const openAccount = (opening: { readonly plan?: Plan; readonly monthlyGrant?: number; readonly monthly?: number; readonly topup?: number } = {}) =>
  Effect.gen(function*() {
    const accounts = yield* AccountsRepo
    const ledger = yield* LedgerRepo
    const id = newId("acct")
    const monthlyGrant = opening.monthlyGrant ?? 0
    yield* accounts.insertAccount({ id, name: null, plan: opening.plan ?? "pro", monthlyGrant })
    yield* ledger.openWallet({ accountId: id, monthlyGrant })
    if (opening.monthly !== undefined) yield* grantTo(id, "monthly", opening.monthly)
    if (opening.topup !== undefined) yield* grantTo(id, "topup", opening.topup)
    return id
  })

/** A pending hold of `amount`; a refusal is a defect here (the cases only reserve what is there). */
const reserve = (
  accountId: string,
  amount: number,
  options: { readonly operation: Operation; readonly requestId?: string; readonly referenceId?: string }
) =>
  Effect.gen(function*() {
    const ledger = yield* LedgerRepo
    const holdId = newId("hold")
    const row = yield* ledger.reserveHold({
      accountId,
      amount,
      operation: options.operation,
      referenceId: options.referenceId ?? null,
      requestId: options.requestId ?? null,
      keyId: null,
      holdId,
      expiresInSeconds: options.operation === "prediction" ? null : 600
    })
    if (Option.isNone(row) || row.value.monthly_balance === null) return yield* Effect.die(new Error("reserve refused"))
    return holdId
  })

type Filters = Parameters<HistoryRepo["Service"]["historyPage"]>[1]

const historyOf = (accountId: string, filters: Filters = {}, after: Option.Option<{ seq: number; ord: number }> = Option.none(), limit = 50) =>
  Effect.flatMap(HistoryRepo, (history) => history.historyPage(accountId, filters, after, limit))

const balancesOf = (accountId: string) =>
  Effect.flatMap(LedgerRepo, (ledger) =>
    Effect.map(ledger.findWallet(accountId), (wallet) => {
      const found = Option.getOrThrow(wallet)
      return { monthly: found.monthly_balance, topup: found.topup_balance }
    }))

const sumByBucket = (rows: ReadonlyArray<HistoryRow>) => ({
  monthly: rows.filter((row) => row.bucket === "monthly").reduce((total, row) => total + row.amount, 0),
  topup: rows.filter((row) => row.bucket === "topup").reduce((total, row) => total + row.amount, 0)
})

/** What a history row says, without the values each backend makes its own (ids, positions, times). */
const shapeOf = (row: HistoryRow) => ({
  type: row.type,
  kind: row.kind,
  bucket: row.bucket,
  amount: row.amount,
  monthly_after: row.monthly_after,
  topup_after: row.topup_after,
  request_id: row.request_id,
  reference_id: row.reference_id,
  reason: row.reason
})

const hour = 3_600_000

for (const backend of backends) {
  const check = <A>(effect: Effect.Effect<A, never, Repos>) => backend.run(effect).then(success)

  describe(`AccountsRepo contract: ${backend.name}`, () => {
    test("an account is found as inserted, with or without the row lock; an unknown id is not", async () => {
      const id = newId("acct")
      const found = await check(Effect.gen(function*() {
        const accounts = yield* AccountsRepo
        yield* accounts.insertAccount({ id, name: "Studio", plan: "custom", monthlyGrant: 250 })
        return { plain: yield* accounts.findAccount(id, false), locked: yield* accounts.findAccount(id, true), unknown: yield* accounts.findAccount(newId("acct"), false) }
      }))
      const row = { id, name: "Studio", plan: "custom", suspended: false, monthly_grant: 250 } as const
      expect(found).toEqual({ plain: Option.some(row), locked: Option.some(row), unknown: Option.none() })
    })

    test("suspension and plan changes are stored; on an unknown id they change nothing", async () => {
      const result = await check(Effect.gen(function*() {
        const accounts = yield* AccountsRepo
        const id = yield* openAccount({ plan: "pro", monthlyGrant: 1_000 })
        const unknown = newId("acct")
        yield* accounts.setSuspended(id, true)
        yield* accounts.changePlan(id, "business", 10_000)
        yield* accounts.setSuspended(unknown, true)
        yield* accounts.changePlan(unknown, "free", 0)
        return { changed: yield* accounts.findAccount(id, false), unknown: yield* accounts.findAccount(unknown, false) }
      }))
      expect(Option.getOrThrow(result.changed)).toMatchObject({ plan: "business", suspended: true, monthly_grant: 10_000, name: null })
      expect(Option.isNone(result.unknown)).toBe(true)
    })

    test("a second account with the same id, or a negative monthly grant, is a defect", async () => {
      const id = newId("acct")
      const insert = (monthlyGrant: number, accountId = id) =>
        Effect.flatMap(AccountsRepo, (accounts) => accounts.insertAccount({ id: accountId, name: null, plan: "custom", monthlyGrant }))
      expect(isDefect(await backend.run(Effect.andThen(insert(0), insert(0))))).toBe(true)
      expect(isDefect(await backend.run(insert(-1, newId("acct"))))).toBe(true)
    })
  })

  describe(`KeysRepo contract: ${backend.name}`, () => {
    const insertKey = (accountId: string, keyHash: string, scopes: ReadonlyArray<"hooks:read" | "predict:write" | "webhooks:write">) =>
      Effect.flatMap(KeysRepo, (keys) => Effect.map(keys.insertKey({ id: newId("key"), accountId, keyHash, scopes }), (row) => ({ ...row, keyHash })))

    test("a live key is found by its hash with its account's plan, suspension and scopes; an unknown hash is not", async () => {
      const before = Date.now()
      const result = await check(Effect.gen(function*() {
        const keys = yield* KeysRepo
        const accountId = yield* openAccount({ plan: "business" })
        const hash = sha256Hex(newId("key"))
        const id = newId("key")
        const { created_at } = yield* keys.insertKey({ id, accountId, keyHash: hash, scopes: ["hooks:read", "webhooks:write"] })
        return { id, accountId, created_at, found: yield* keys.findLiveKeyByHash(hash), unknown: yield* keys.findLiveKeyByHash(sha256Hex("nothing")) }
      }))
      expect(Option.getOrThrow(result.found)).toEqual({
        key_id: result.id,
        account_id: result.accountId,
        plan: "business",
        suspended: false,
        scopes: ["hooks:read", "webhooks:write"]
      })
      expect(Option.isNone(result.unknown)).toBe(true)
      expect(result.created_at.getTime()).toBeGreaterThanOrEqual(before - hour)
      expect(result.created_at.getTime()).toBeLessThanOrEqual(Date.now() + hour)
    })

    test("a revoked key is not found; revoking again still answers the key; an unknown key answers None", async () => {
      const result = await check(Effect.gen(function*() {
        const keys = yield* KeysRepo
        const accountId = yield* openAccount()
        const { keyHash } = yield* insertKey(accountId, sha256Hex(newId("key")), ["hooks:read"])
        const live = yield* keys.findLiveKeyByHash(keyHash)
        const keyId = Option.getOrThrow(live).key_id
        const first = yield* keys.revokeKey(keyId)
        const again = yield* keys.revokeKey(keyId)
        return { keyId, first, again, after: yield* keys.findLiveKeyByHash(keyHash), unknown: yield* keys.revokeKey(newId("key")) }
      }))
      expect(result.first).toEqual(Option.some({ id: result.keyId }))
      expect(result.again).toEqual(Option.some({ id: result.keyId }))
      expect(Option.isNone(result.after)).toBe(true)
      expect(Option.isNone(result.unknown)).toBe(true)
    })

    test("a lookup reads the account's suspension and plan as they are now; no scopes stay no scopes", async () => {
      const found = await check(Effect.gen(function*() {
        const keys = yield* KeysRepo
        const accounts = yield* AccountsRepo
        const accountId = yield* openAccount({ plan: "pro" })
        const { keyHash } = yield* insertKey(accountId, sha256Hex(newId("key")), [])
        yield* accounts.setSuspended(accountId, true)
        yield* accounts.changePlan(accountId, "free", 0)
        return yield* keys.findLiveKeyByHash(keyHash)
      }))
      expect(Option.getOrThrow(found)).toMatchObject({ plan: "free", suspended: true, scopes: [] })
    })

    test("a second key with the same hash, or a key for an unknown account, is a defect", async () => {
      const hash = sha256Hex(newId("key"))
      const duplicate = Effect.gen(function*() {
        const accountId = yield* openAccount()
        yield* insertKey(accountId, hash, ["hooks:read"])
        yield* insertKey(accountId, hash, ["hooks:read"])
      })
      expect(isDefect(await backend.run(duplicate))).toBe(true)
      expect(isDefect(await backend.run(insertKey(newId("acct"), sha256Hex(newId("key")), ["hooks:read"])))).toBe(true)
    })
  })

  describe(`AlertsRepo contract: ${backend.name}`, () => {
    test("a wallet's alert starts unset; an account without a wallet has none, and setting or clearing it answers None", async () => {
      const result = await check(Effect.gen(function*() {
        const alerts = yield* AlertsRepo
        const accountId = yield* openAccount({ topup: 10 })
        const unknown = newId("acct")
        return {
          fresh: yield* alerts.findAlert(accountId),
          missing: [yield* alerts.findAlert(unknown), yield* alerts.setThreshold(unknown, 5), yield* alerts.clearThreshold(unknown)]
        }
      }))
      expect(result.fresh).toEqual(Option.some({ low_balance_threshold: null, low_balance_armed: false }))
      expect(result.missing.every(Option.isNone)).toBe(true)
    })

    test("a threshold is armed when the balance is at or above it, not when below; clearing disarms", async () => {
      const rows = await check(Effect.gen(function*() {
        const alerts = yield* AlertsRepo
        const accountId = yield* openAccount({ monthly: 60, topup: 40 })
        return [
          yield* alerts.setThreshold(accountId, 100),
          yield* alerts.setThreshold(accountId, 101),
          yield* alerts.setThreshold(accountId, 50),
          yield* alerts.clearThreshold(accountId),
          yield* alerts.findAlert(accountId)
        ].map(Option.getOrThrow)
      }))
      expect(rows.map((row) => [row.low_balance_threshold, row.low_balance_armed])).toEqual([
        [100, true],
        [101, false],
        [50, true],
        [null, false],
        [null, false]
      ])
    })

    test("a debit below an armed threshold disarms it; credits coming back from a hold do not re-arm; a grant at or above does", async () => {
      const armed = await check(Effect.gen(function*() {
        const alerts = yield* AlertsRepo
        const ledger = yield* LedgerRepo
        const accountId = yield* openAccount({ topup: 100 })
        const armedOf = Effect.map(alerts.findAlert(accountId), (row) => Option.getOrThrow(row).low_balance_armed)
        const steps: Array<boolean> = []
        yield* alerts.setThreshold(accountId, 50)
        steps.push(yield* armedOf)
        yield* ledger.chargeAtOnce({ accountId, amount: 40, operation: "hook", referenceId: null, requestId: null, keyId: null })
        steps.push(yield* armedOf) // 60: still armed
        const hold = yield* reserve(accountId, 20, { operation: "search" })
        steps.push(yield* armedOf) // 40: below
        yield* ledger.refundHold(hold)
        steps.push(yield* armedOf) // 60 again, from a refund: stays disarmed
        yield* grantTo(accountId, "topup", 1)
        steps.push(yield* armedOf) // 61, from a grant: re-armed
        yield* ledger.chargeAtOnce({ accountId, amount: 20, operation: "hook", referenceId: null, requestId: null, keyId: null })
        yield* grantTo(accountId, "topup", 5)
        steps.push(yield* armedOf) // 41, then 46 from a grant: still below, not armed
        return steps
      }))
      expect(armed).toEqual([true, true, false, false, true, false])
    })

    test("a new period disarms when the new balance is below the threshold and re-arms when its grant reaches it", async () => {
      const armed = await check(Effect.gen(function*() {
        const alerts = yield* AlertsRepo
        const ledger = yield* LedgerRepo
        const accountId = yield* openAccount({ monthlyGrant: 100, monthly: 100 })
        const armedOf = Effect.map(alerts.findAlert(accountId), (row) => Option.getOrThrow(row).low_balance_armed)
        yield* alerts.setThreshold(accountId, 80)
        const steps = [yield* armedOf]
        yield* ledger.startNewPeriod({ accountId, monthlyGrant: 50 })
        steps.push(yield* armedOf)
        yield* ledger.startNewPeriod({ accountId, monthlyGrant: 1_000 })
        steps.push(yield* armedOf)
        return steps
      }))
      expect(armed).toEqual([true, false, true])
    })

    test("a threshold of zero is a defect", async () => {
      const exit = await backend.run(Effect.gen(function*() {
        const accountId = yield* openAccount({ topup: 10 })
        return yield* Effect.flatMap(AlertsRepo, (alerts) => alerts.setThreshold(accountId, 0))
      }))
      expect(isDefect(exit)).toBe(true)
    })
  })

  describe(`HistoryRepo contract: ${backend.name}`, () => {
    test("a grant is listed with its reference, reason and request id and the balances after it; other accounts' rows are not", async () => {
      const result = await check(Effect.gen(function*() {
        const accountId = yield* openAccount()
        const other = yield* openAccount({ topup: 7 })
        yield* grantTo(accountId, "topup", 30, { referenceId: "inv_1", reason: "goodwill", requestId: "req_grant" })
        return { rows: yield* historyOf(accountId), other: yield* historyOf(other) }
      }))
      expect(result.rows.map(shapeOf)).toEqual([
        { type: "grant", kind: "admin", bucket: "topup", amount: 30, monthly_after: 0, topup_after: 30, request_id: "req_grant", reference_id: "inv_1", reason: "goodwill" }
      ])
      expect(result.rows[0]).toMatchObject({ ord: 0, id: expect.stringMatching(/^txn_[0-9a-f]{32}$/) })
      expect(result.rows[0].created_at).toBeInstanceOf(Date)
      expect(result.other.map((row) => row.amount)).toEqual([7])
    })

    test("a request's settled hold is one charge per bucket it took from, for what it settled, at its settle", async () => {
      const result = await check(Effect.gen(function*() {
        const accountId = yield* openAccount({ monthlyGrant: 100, monthly: 5, topup: 10 })
        const hold = yield* reserve(accountId, 8, { operation: "search", requestId: "req_search", referenceId: "q_1" })
        yield* Effect.flatMap(LedgerRepo, (ledger) => ledger.settleHold({ holdId: hold, charge: 6 }))
        return { rows: yield* historyOf(accountId), balances: yield* balancesOf(accountId) }
      }))
      const charge = { type: "charge", kind: "search", monthly_after: 0, topup_after: 9, request_id: "req_search", reference_id: "q_1", reason: null } as const
      expect(result.rows.map(shapeOf)).toEqual([
        { ...charge, bucket: "topup", amount: -1 },
        { ...charge, bucket: "monthly", amount: -5 },
        { type: "grant", kind: "admin", bucket: "topup", amount: 10, monthly_after: 5, topup_after: 10, request_id: null, reference_id: null, reason: null },
        { type: "grant", kind: "admin", bucket: "monthly", amount: 5, monthly_after: 5, topup_after: 0, request_id: null, reference_id: null, reason: null }
      ])
      const [topup, monthly, grant] = result.rows
      expect([topup.pos === monthly.pos, topup.ord, monthly.ord, monthly.pos > grant.pos]).toEqual([true, 2, 1, true])
      expect(topup.id).not.toBe(monthly.id)
      expect(sumByBucket(result.rows)).toEqual(result.balances)
    })

    test("pending, refunded, voided and zero-settled holds are not listed", async () => {
      const rows = await check(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const accountId = yield* openAccount({ topup: 20 })
        yield* reserve(accountId, 2, { operation: "search" })
        yield* ledger.refundHold(yield* reserve(accountId, 2, { operation: "list" }))
        yield* ledger.voidHold(yield* reserve(accountId, 2, { operation: "search" }))
        yield* ledger.settleHold({ holdId: yield* reserve(accountId, 2, { operation: "search" }), charge: 0 })
        return yield* historyOf(accountId)
      }))
      expect(rows.map((row) => row.type)).toEqual(["grant"])
    })

    test("a prediction's hold is listed at once as a charge, and its release as a refund", async () => {
      const rows = await check(Effect.gen(function*() {
        const accountId = yield* openAccount({ topup: 30 })
        const hold = yield* reserve(accountId, 20, { operation: "prediction", requestId: "req_predict", referenceId: "pred_1" })
        yield* Effect.flatMap(LedgerRepo, (ledger) => ledger.refundHold(hold))
        return yield* historyOf(accountId)
      }))
      const prediction = { kind: "prediction", bucket: "topup", request_id: "req_predict", reference_id: "pred_1", reason: null } as const
      expect(rows.map(shapeOf)).toEqual([
        { ...prediction, type: "refund", amount: 20, monthly_after: 0, topup_after: 30 },
        { ...prediction, type: "charge", amount: -20, monthly_after: 0, topup_after: 10 },
        { type: "grant", kind: "admin", bucket: "topup", amount: 30, monthly_after: 0, topup_after: 30, request_id: null, reference_id: null, reason: null }
      ])
    })

    test("a charge taken at once is listed with its request and reference", async () => {
      const rows = await check(Effect.gen(function*() {
        const accountId = yield* openAccount({ topup: 10 })
        yield* Effect.flatMap(LedgerRepo, (ledger) =>
          ledger.chargeAtOnce({ accountId, amount: 2, operation: "hook", referenceId: "hook_1", requestId: "req_hook", keyId: null }))
        return yield* historyOf(accountId)
      }))
      expect(shapeOf(rows[0])).toEqual({
        type: "charge",
        kind: "hook",
        bucket: "topup",
        amount: -2,
        monthly_after: 0, topup_after: 8,
        request_id: "req_hook",
        reference_id: "hook_1",
        reason: null
      })
    })

    test("a new period lists the expiry of unused monthly credits, then the new grant, newest first", async () => {
      const rows = await check(Effect.gen(function*() {
        const accountId = yield* openAccount({ monthlyGrant: 100, monthly: 40 })
        yield* Effect.flatMap(LedgerRepo, (ledger) => ledger.startNewPeriod({ accountId, monthlyGrant: 1_000 }))
        return yield* historyOf(accountId)
      }))
      expect(rows.map((row) => [row.type, row.kind, row.amount, row.monthly_after, row.reason])).toEqual([
        ["grant", "rollover", 1_000, 1_000, "plan changed"],
        ["expiry", "rollover", -40, 0, "plan changed"],
        ["grant", "admin", 40, 40, null]
      ])
    })

    test("pages: up to limit + 1 rows, strictly after the position, so pages never overlap, even inside one hold's rows", async () => {
      const result = await check(Effect.gen(function*() {
        const accountId = yield* openAccount({ monthlyGrant: 100, monthly: 2, topup: 10 })
        const hold = yield* reserve(accountId, 5, { operation: "search" })
        yield* Effect.flatMap(LedgerRepo, (ledger) => ledger.settleHold({ holdId: hold, charge: 5 }))
        yield* grantTo(accountId, "topup", 1)
        yield* grantTo(accountId, "topup", 1)
        const full = yield* historyOf(accountId)
        const pages: Array<ReadonlyArray<HistoryRow>> = []
        let after = Option.none<{ seq: number; ord: number }>()
        for (;;) {
          const rows = yield* historyOf(accountId, {}, after, 3)
          pages.push(rows)
          if (rows.length <= 3) break
          const last = rows[2]
          after = Option.some({ seq: last.pos, ord: last.ord })
        }
        return { full, pages }
      }))
      expect(result.full.map((row) => [row.type, row.bucket, row.amount])).toEqual([
        ["grant", "topup", 1],
        ["grant", "topup", 1],
        ["charge", "topup", -3],
        ["charge", "monthly", -2],
        ["grant", "topup", 10],
        ["grant", "monthly", 2]
      ])
      expect(result.pages.map((rows) => rows.length)).toEqual([4, 3])
      expect([...result.pages[0].slice(0, 3), ...result.pages[1]]).toEqual([...result.full])
    })

    test("filters: by type, and by creation time at either end", async () => {
      const now = Date.now()
      const counts = await check(Effect.gen(function*() {
        const accountId = yield* openAccount({ topup: 10 })
        yield* Effect.flatMap(LedgerRepo, (ledger) =>
          ledger.chargeAtOnce({ accountId, amount: 2, operation: "list", referenceId: null, requestId: null, keyId: null }))
        const count = (filters: Filters) => Effect.map(historyOf(accountId, filters), (rows) => rows.map((row) => row.type))
        return [
          yield* count({ type: "grant" }),
          yield* count({ type: "charge" }),
          yield* count({ "created[gte]": new Date(now + hour) }),
          yield* count({ "created[lte]": new Date(now - hour) }),
          yield* count({ "created[gte]": new Date(now - hour), "created[lte]": new Date(now + hour) })
        ]
      }))
      expect(counts).toEqual([["grant"], ["charge"], [], [], ["charge", "grant"]])
    })

    test("usage by operation: spent net of a request's returned credits, prediction refunds, grants and expiries, in key order", async () => {
      const now = Date.now()
      const result = await check(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const history = yield* HistoryRepo
        const accountId = yield* openAccount({ monthlyGrant: 100, monthly: 40, topup: 20 })
        yield* ledger.settleHold({ holdId: yield* reserve(accountId, 10, { operation: "search" }), charge: 4 })
        yield* ledger.refundHold(yield* reserve(accountId, 5, { operation: "prediction" }))
        yield* ledger.chargeAtOnce({ accountId, amount: 2, operation: "hook", referenceId: null, requestId: null, keyId: null })
        yield* ledger.startNewPeriod({ accountId, monthlyGrant: 1_000 })
        const from = new Date(now - 24 * hour)
        const to = new Date(now + 24 * hour)
        return {
          byOperation: yield* history.usageRows(accountId, from, to, "operation"),
          byDay: yield* history.usageRows(accountId, from, to, "day"),
          later: yield* history.usageRows(accountId, new Date(now + hour), new Date(now + 2 * hour), "day"),
          days: (yield* historyOf(accountId)).map((row) => row.created_at.toISOString().slice(0, 10)),
          balances: yield* balancesOf(accountId)
        }
      }))
      const zero = { spent: 0, refunded: 0, granted: 0, expired: 0 }
      expect(result.byOperation).toEqual([
        { ...zero, key: "admin", granted: 60, net: 60 },
        { ...zero, key: "get", spent: 2, net: -2 },
        { ...zero, key: "predict", spent: 5, refunded: 5, net: 0 },
        { ...zero, key: "rollover", granted: 1_000, expired: 34, net: 966 },
        { ...zero, key: "search", spent: 4, net: -4 }
      ])
      expect(result.byDay.map((row) => row.key)).toEqual([...new Set(result.days)].sort())
      const total = (pick: (row: (typeof result.byDay)[number]) => number) => result.byDay.reduce((sum, row) => sum + pick(row), 0)
      expect([total((row) => row.spent), total((row) => row.refunded), total((row) => row.granted), total((row) => row.expired)])
        .toEqual([11, 5, 1_060, 34])
      expect(total((row) => row.net)).toBe(result.balances.monthly + result.balances.topup)
      expect(result.later).toEqual([])
    })

    test("usage by key: each key's debits net of what its holds gave back, grants and expiries under none, in key order", async () => {
      const now = Date.now()
      const suffix = newId("key").slice(4)
      const keys = [`key_a${suffix}`, `key_b${suffix}`]
      const result = await check(Effect.gen(function*() {
        const ledger = yield* LedgerRepo
        const history = yield* HistoryRepo
        const accountId = yield* openAccount({ monthlyGrant: 100, monthly: 40, topup: 20 })
        const debit = { accountId, operation: "search" as const, referenceId: null, requestId: null, expiresInSeconds: 600 }
        yield* ledger.reserveHold({ ...debit, amount: 10, keyId: keys[0], holdId: newId("hold") })
        const held = newId("hold")
        yield* ledger.reserveHold({ ...debit, amount: 6, keyId: keys[1], holdId: held })
        yield* ledger.settleHold({ holdId: held, charge: 1 })
        yield* ledger.chargeAtOnce({ accountId, amount: 2, operation: "hook", referenceId: null, requestId: null, keyId: keys[0] })
        yield* ledger.startNewPeriod({ accountId, monthlyGrant: 100 })
        return yield* history.usageRows(accountId, new Date(now - 24 * hour), new Date(now + 24 * hour), "key")
      }))
      const zero = { spent: 0, refunded: 0, granted: 0, expired: 0 }
      expect(result).toEqual([
        { ...zero, key: keys[0], spent: 12, net: -12 },
        { ...zero, key: keys[1], spent: 1, net: -1 },
        { ...zero, key: "none", granted: 160, expired: 27, net: 133 }
      ])
    })
  })
}

test("the memory HistoryRepo's usageStatement is the PostgreSQL statement, compiled the same", async () => {
  const from = new Date(Date.UTC(2026, 0, 1))
  const to = new Date(Date.UTC(2026, 1, 1))
  const compiled = Effect.map(HistoryRepo, (history) => history.usageStatement("acct_x", from, to, "operation").compile())
  const onPostgres = await postgres.runPromise(compiled)
  const inMemory = await Effect.runPromise(Effect.provide(compiled, makeHistoryRepoInMemory().layer))
  expect(inMemory).toEqual(onPostgres)
  expect(inMemory[0]).toContain("FROM credit_journal")
})

test("the memory HistoryRepo refuses to read journal rows written past its ledgerLayer", async () => {
  const ledger = makeLedgerRepoInMemory()
  const history = makeHistoryRepoInMemory(ledger)
  const program = Effect.gen(function*() {
    yield* Effect.flatMap(LedgerRepo, (repo) => repo.openWallet({ accountId: "acct_a", monthlyGrant: 0 }))
    yield* grantTo("acct_a", "topup", 5)
    return yield* historyOf("acct_a")
  })
  // The memory ledger's own layer writes the row; no seq, id or time was recorded for it.
  const exit = await Effect.runPromiseExit(Effect.provide(program, Layer.merge(ledger.layer, history.layer)))
  expect(isDefect(exit)).toBe(true)
})

// ---- The services over the memory repositories, no database ----

const start = Date.UTC(2026, 0, 15, 12)

const serviceEnv: Record<string, string> = {
  CURSOR_SECRET: "memory-repos-cursor-secret",
  WEBHOOK_SECRET_KEY: "memory-repos-webhook-secret-key",
  ADMIN_TOKEN: "memory-repos-admin-token",
  // Never written: every secret above is given.
  DATA_DIR: join(tmpdir(), "hookline-memory-repos-unused")
}

/** A copy of the accounts and the ledger, and what puts it back (a transaction's rollback). */
const saveStates = (accounts: MemoryAccountsState, ledger: MemoryLedgerState): SaveStates => () => {
  const savedAccounts = [...accounts.accounts.values()].map((account) => ({ ...account }))
  const savedLedger = {
    wallets: [...ledger.wallets].map(([id, wallet]) => [id, { ...wallet }] as const),
    holds: [...ledger.holds].map(([id, hold]) => [id, { ...hold }] as const),
    journal: [...ledger.journal],
    depleted: [...ledger.depleted],
    budgets: [...ledger.budgets].map(([id, budget]) => [id, { ...budget }] as const),
    limitEvents: [...ledger.limitEvents]
  }
  return () => {
    // In place: the KeysRepo memory reads the same accounts map.
    accounts.accounts.clear()
    for (const account of savedAccounts) accounts.accounts.set(account.id, { ...account })
    ledger.wallets = new Map(savedLedger.wallets.map(([id, wallet]) => [id, { ...wallet }]))
    ledger.holds = new Map(savedLedger.holds.map(([id, hold]) => [id, { ...hold }]))
    ledger.journal = [...savedLedger.journal]
    ledger.depleted = [...savedLedger.depleted]
    ledger.budgets = new Map(savedLedger.budgets.map(([id, budget]) => [id, { ...budget }]))
    ledger.limitEvents = [...savedLedger.limitEvents]
  }
}

type Services = Accounts | Auth | WalletAlerts | CreditHistory | Usage | Ledger | KeyBudgets | Repos

/**
 * Runs `body` against the services over fresh memory repositories, the clock at `start`.
 * Webhooks is the real service over a WebhooksRepo that only records plan-loss disables (or,
 * with `webhookStore: "down"`, dies there); anything else it is asked is a defect.
 */
const runServices = async <A, E>(
  body: Effect.Effect<A, E, Services> | ((memory: MemoryRepos) => Effect.Effect<A, E, Services>),
  options: { readonly env?: Record<string, string>; readonly webhookStore?: "up" | "down" } = {}
) => {
  const memory = memoryRepos()
  const planLossDisabled: Array<string> = []
  const webhooksRepo = Layer.mock(WebhooksRepo)({
    disableForPlanLoss: (accountId: string) =>
      options.webhookStore === "down"
        ? Effect.die(new Error("the webhook store is down"))
        : Effect.sync(() => void planLossDisabled.push(accountId))
  })
  const webhooks = Webhooks.layerWithoutDependencies.pipe(
    Layer.provide([
      webhooksRepo,
      Layer.mock(WebhookTransport)({}),
      Layer.succeed(DatabaseMode, { embedded: true, dataDir: serviceEnv.DATA_DIR }),
      Secrets.layer
    ])
  )
  const ledger = Ledger.layerWithoutDependencies.pipe(Layer.provideMerge(memory.layer))
  const domain = Layer.mergeAll(
    Auth.layerWithoutDependencies,
    WalletAlerts.layerWithoutDependencies,
    CreditHistory.layerWithoutDependencies,
    Usage.layerWithoutDependencies,
    KeyBudgets.layerWithoutDependencies
  ).pipe(Layer.provideMerge(ledger))
  const accounts = Accounts.layerWithoutDependencies.pipe(
    Layer.provide([webhooks, memoryTransactions(saveStates(memory.accounts.state, memory.ledger.state))]),
    Layer.provideMerge(domain)
  )
  const program = Effect.gen(function*() {
    yield* TestClock.setTime(start)
    return yield* (Effect.isEffect(body) ? body : body(memory))
  }).pipe(
    Effect.provide(Layer.mergeAll(accounts, TestClock.layer(), Layer.succeed(References.MinimumLogLevel, "Error")).pipe(
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { ...serviceEnv, ...options.env } })))
    ))
  )
  const exit = await Effect.runPromiseExit(program)
  return { exit, memory, planLossDisabled }
}

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const error = Cause.findErrorOption(exit.cause)
  if (Option.isNone(error)) throw new Error(`expected a failure, got ${String(exit.cause)}`)
  return error.value
}

const insertAccount = (id: string, plan: Plan) =>
  Effect.flatMap(AccountsRepo, (accounts) => accounts.insertAccount({ id, name: null, plan, monthlyGrant: 0 }))

describe("Auth over the memory KeysRepo", () => {
  test("a created key is found by its plain key with its account's plan and its scopes, duplicates dropped; only its hash is kept", async () => {
    const { exit, memory } = await runServices(Effect.gen(function*() {
      const auth = yield* Auth
      yield* insertAccount("acct_a", "pro")
      const created = yield* auth.createKey("acct_a", ["hooks:read", "hooks:read", "predict:write"])
      const all = yield* auth.createKey("acct_a", undefined)
      return { created, all, owner: yield* auth.findKey(created.api_key), unknown: yield* auth.findKey("hkl_live_notakeynotakeynotakey") }
    }))
    const { all, created, owner, unknown } = success(exit)
    expect(created.api_key).toMatch(apiKeyPattern)
    expect(created.scopes).toEqual(["hooks:read", "predict:write"])
    expect(all.scopes).toEqual(["hooks:read", "predict:write", "webhooks:write"])
    expect(created.created_at).toBe(new Date(start).toISOString())
    expect(Option.getOrThrow(owner)).toEqual({
      keyId: created.id,
      accountId: "acct_a",
      plan: "pro",
      suspended: false,
      scopes: ["hooks:read", "predict:write"]
    })
    expect(Option.isNone(unknown)).toBe(true)
    expect(memory.keys.state.keys.get(created.id)?.keyHash).toBe(sha256Hex(created.api_key))
    expect(JSON.stringify([...memory.keys.state.keys.values()])).not.toContain(created.api_key)
  })

  test("a revoked key still answers from the cache until AUTH_CACHE_TTL has passed, then is unknown", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const auth = yield* Auth
      yield* insertAccount("acct_a", "pro")
      const key = yield* auth.createKey("acct_a", undefined)
      yield* auth.findKey(key.api_key)
      const revoked = yield* auth.revokeKey(key.id)
      const cached = yield* auth.findKey(key.api_key)
      yield* TestClock.adjust("499 millis")
      const stillCached = yield* auth.findKey(key.api_key)
      yield* TestClock.adjust("1 millis")
      return { revoked, cached, stillCached, expired: yield* auth.findKey(key.api_key) }
    }))
    const result = success(exit)
    expect(result.revoked).toBe(true)
    expect([Option.isSome(result.cached), Option.isSome(result.stillCached), Option.isSome(result.expired)]).toEqual([true, true, false])
  })

  test("with AUTH_CACHE_TTL=0 a revocation is seen at once", async () => {
    const { exit } = await runServices(
      Effect.gen(function*() {
        const auth = yield* Auth
        yield* insertAccount("acct_a", "pro")
        const key = yield* auth.createKey("acct_a", undefined)
        yield* auth.findKey(key.api_key)
        yield* auth.revokeKey(key.id)
        return yield* auth.findKey(key.api_key)
      }),
      { env: { AUTH_CACHE_TTL: "0 millis" } }
    )
    expect(Option.isNone(success(exit))).toBe(true)
  })

  test("revoking an unknown key answers false; revoking twice answers true both times and keeps the first revocation's time", async () => {
    const { exit, memory } = await runServices(Effect.gen(function*() {
      const auth = yield* Auth
      yield* insertAccount("acct_a", "pro")
      const key = yield* auth.createKey("acct_a", undefined)
      const first = yield* auth.revokeKey(key.id)
      yield* TestClock.adjust("1 minute")
      const second = yield* auth.revokeKey(key.id)
      return { key, answers: [yield* auth.revokeKey("key_unknown"), first, second] }
    }))
    const { answers, key } = success(exit)
    expect(answers).toEqual([false, true, true])
    expect(memory.keys.state.keys.get(key.id)?.revokedAt).toBe(start)
  })
})

describe("WalletAlerts over the memory AlertsRepo", () => {
  test("armed at or above the balance; a debit below disarms; a hold's credits coming back do not re-arm; a grant does", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const alerts = yield* WalletAlerts
      const ledger = yield* Ledger
      yield* ledger.openWallet("acct_a", { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 100 })
      const set = yield* alerts.set("acct_a", 50)
      const hold = yield* ledger.reserve("acct_a", 60, { operation: "search" })
      const below = yield* alerts.get("acct_a")
      yield* ledger.refund(hold.id)
      const refunded = yield* alerts.get("acct_a")
      yield* ledger.grant("acct_a", "topup", 1, {})
      return [set, below, refunded, yield* alerts.get("acct_a")]
    }))
    expect(success(exit).map((alert) => [alert.threshold, alert.armed])).toEqual([[50, true], [50, false], [50, false], [50, true]])
  })

  test("a rollover that is due is applied before a threshold is judged, so it is judged against the new period's balance", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const alerts = yield* WalletAlerts
      const ledger = yield* Ledger
      yield* ledger.openWallet("acct_a", { monthlyGrant: 10, monthlyBalance: 100, topupBalance: 0 })
      yield* TestClock.adjust("32 days")
      return { alert: yield* alerts.set("acct_a", 50), wallet: yield* ledger.wallet("acct_a") }
    }))
    // 100 before the rollover would have armed it; the new period holds 10.
    expect(success(exit)).toMatchObject({ alert: { threshold: 50, armed: false }, wallet: { monthly: 10 } })
  })

  test("clearing leaves no threshold and nothing armed; an account without a wallet is a defect", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const alerts = yield* WalletAlerts
      yield* Effect.flatMap(Ledger, (ledger) => ledger.openWallet("acct_a", { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 100 }))
      yield* alerts.set("acct_a", 50)
      return { cleared: yield* alerts.clear("acct_a"), missing: yield* Effect.exit(alerts.get("acct_none")) }
    }))
    const { cleared, missing } = success(exit)
    expect(cleared).toEqual({ object: "wallet_alert", threshold: null, armed: false })
    expect(isDefect(missing)).toBe(true)
  })
})

describe("CreditHistory over the memory HistoryRepo", () => {
  test("a request's hold is one charge per bucket it took from, for what it settled; pending and refunded holds are not listed", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const ledger = yield* Ledger
      const history = yield* CreditHistory
      yield* ledger.openWallet("acct_a", { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 })
      const request = yield* ledger.reserve("acct_a", 8, { operation: "search", requestId: "req_1" })
      const answered = Option.getOrThrow(yield* ledger.settle(request.id, 6))
      const pending = yield* ledger.reserve("acct_a", 1, { operation: "search", requestId: "req_2" })
      yield* ledger.refund((yield* ledger.reserve("acct_a", 1, { operation: "list", requestId: "req_3" })).id)
      const whilePending = yield* history.list("acct_a", {}, "wallet.transactions")
      yield* ledger.settle(pending.id, 1)
      return { answered, whilePending, settled: yield* history.list("acct_a", {}, "wallet.transactions"), wallet: yield* ledger.wallet("acct_a") }
    }))
    const { answered, settled, wallet, whilePending } = success(exit)
    expect(whilePending.data.map((row) => [row.type, row.bucket, row.amount, row.request_id])).toEqual([
      ["charge", "topup", -1, "req_1"],
      ["charge", "monthly", -5, "req_1"],
      ["grant", "topup", 10, null],
      ["grant", "monthly", 5, null]
    ])
    // The balances the request answered with (X-Credits-Remaining).
    expect(whilePending.data[0].balance_after).toEqual(answered.balancesAfter)
    const sum = (bucket: Bucket) => settled.data.filter((row) => row.bucket === bucket).reduce((total, row) => total + row.amount, 0)
    expect({ monthly: sum("monthly"), topup: sum("topup") }).toEqual({ monthly: wallet.monthly, topup: wallet.topup })
    expect(settled.data[0]).toMatchObject({ type: "charge", amount: -1, request_id: "req_2" })
  })

  test("a rollover that is due is applied before listing: its expiry and grant come first, at the clock's time", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const ledger = yield* Ledger
      yield* ledger.openWallet("acct_a", { monthlyGrant: 100, monthlyBalance: 40, topupBalance: 0 })
      yield* TestClock.adjust("32 days")
      return yield* Effect.flatMap(CreditHistory, (history) => history.list("acct_a", {}, "wallet.transactions"))
    }))
    const rolledAt = new Date(start + 32 * 24 * hour).toISOString()
    expect(success(exit).data.map((row) => [row.type, row.amount, row.reason, row.reference.kind, row.created_at])).toEqual([
      ["grant", 100, "monthly grant", "rollover", rolledAt],
      ["expiry", -40, "monthly period ended", "rollover", rolledAt],
      ["grant", 40, "opening balance", "admin", new Date(start).toISOString()]
    ])
  })

  test("a prediction held across a rollover: its refund is listed, and the expiry of its monthly part", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const ledger = yield* Ledger
      yield* ledger.openWallet("acct_a", { monthlyGrant: 100, monthlyBalance: 5, topupBalance: 10 })
      const hold = yield* ledger.reserve("acct_a", 8, { operation: "prediction", expires: false, requestId: "req_p", referenceId: "pred_1" })
      yield* TestClock.adjust("31 days")
      yield* ledger.wallet("acct_a")
      yield* ledger.refund(hold.id)
      return { page: yield* Effect.flatMap(CreditHistory, (history) => history.list("acct_a", {}, "wallet.transactions")), wallet: yield* ledger.wallet("acct_a") }
    }))
    const { page, wallet } = success(exit)
    expect(page.data.map((row) => [row.type, row.bucket, row.amount, row.reference.id])).toEqual([
      ["expiry", "monthly", -5, "pred_1"],
      ["refund", "monthly", 5, "pred_1"],
      ["refund", "topup", 3, "pred_1"],
      ["grant", "monthly", 100, null],
      ["charge", "topup", -3, "pred_1"],
      ["charge", "monthly", -5, "pred_1"],
      ["grant", "topup", 10, null],
      ["grant", "monthly", 5, null]
    ])
    expect(page.data[0].reason).toBe("monthly period ended while held")
    const sum = (bucket: Bucket) => page.data.filter((row) => row.bucket === bucket).reduce((total, row) => total + row.amount, 0)
    expect({ monthly: sum("monthly"), topup: sum("topup") }).toEqual({ monthly: wallet.monthly, topup: wallet.topup })
  })

  test("pages follow next_cursor; rows added meanwhile never shift them; a cursor works only with the filters and route that made it", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const ledger = yield* Ledger
      const history = yield* CreditHistory
      yield* ledger.openWallet("acct_a", { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 0 })
      for (const amount of [1, 2, 3, 4, 5]) yield* ledger.grant("acct_a", "topup", amount, {})
      const first = yield* history.list("acct_a", { limit: 2 }, "wallet.transactions")
      yield* ledger.grant("acct_a", "topup", 6, {})
      const cursor = first.next_cursor ?? ""
      const second = yield* history.list("acct_a", { limit: 2, cursor }, "wallet.transactions")
      const third = yield* history.list("acct_a", { limit: 2, cursor: second.next_cursor ?? "" }, "wallet.transactions")
      const otherFilter = yield* Effect.flip(history.list("acct_a", { limit: 2, cursor, type: "grant" }, "wallet.transactions"))
      const otherRoute = yield* Effect.flip(history.list("acct_a", { limit: 2, cursor }, "admin.transactions"))
      return { pages: [first, second, third], refused: [otherFilter._tag, otherRoute._tag] }
    }))
    const { pages, refused } = success(exit)
    expect(pages.map((page) => [page.data.map((row) => row.amount), page.has_more])).toEqual([
      [[5, 4], true],
      [[3, 2], true],
      [[1], false]
    ])
    expect(pages[2].next_cursor).toBeNull()
    expect(refused).toEqual(["InvalidCursor", "InvalidCursor"])
  })
})

describe("Usage over the memory HistoryRepo", () => {
  test("per UTC day in day order, and per operation, each journal row counted once", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const ledger = yield* Ledger
      const usage = yield* Usage
      yield* ledger.openWallet("acct_a", { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 50 })
      yield* TestClock.adjust("1 day")
      yield* ledger.charge("acct_a", 2, { operation: "hook" })
      yield* ledger.settle((yield* ledger.reserve("acct_a", 10, { operation: "search" })).id, 3)
      yield* TestClock.adjust("1 day")
      return {
        byDay: yield* usage.summarise("acct_a", {}),
        byOperation: yield* usage.summarise("acct_a", { group_by: "operation" }),
        wallet: yield* ledger.wallet("acct_a")
      }
    }))
    const { byDay, byOperation, wallet } = success(exit)
    const zero = { spent: 0, refunded: 0, granted: 0, expired: 0 }
    expect(byDay.data).toEqual([
      { ...zero, key: "2026-01-15", granted: 50, net: 50 },
      { ...zero, key: "2026-01-16", spent: 5, net: -5 }
    ])
    expect(byOperation.data).toEqual([
      { ...zero, key: "admin", granted: 50, net: 50 },
      { ...zero, key: "get", spent: 2, net: -2 },
      { ...zero, key: "search", spent: 3, net: -3 }
    ])
    expect(byDay.totals).toEqual({ ...zero, spent: 5, granted: 50, net: wallet.topup })
  })

  test("an empty range, or one longer than USAGE_MAX_RANGE_DAYS, is refused; a larger USAGE_MAX_RANGE_DAYS admits it", async () => {
    const day = 24 * hour
    const summarise = (from: number, to: number) =>
      Effect.flatMap(Usage, (usage) => Effect.flip(usage.summarise("acct_a", { from: new Date(from), to: new Date(to) })))
    const opened = Effect.flatMap(Ledger, (ledger) => ledger.openWallet("acct_a", { monthlyGrant: 0, monthlyBalance: 0, topupBalance: 1 }))
    const { exit } = await runServices(Effect.gen(function*() {
      yield* opened
      return [yield* summarise(start, start), yield* summarise(start - 90 * day, start + 4 * day)]
    }))
    expect(success(exit).map((error) => error._tag)).toEqual(["ValidationFailed", "ValidationFailed"])
    const wider = await runServices(
      Effect.andThen(opened, Effect.flatMap(Usage, (usage) => usage.summarise("acct_a", { from: new Date(start - 90 * day), to: new Date(start + 4 * day) }))),
      { env: { USAGE_MAX_RANGE_DAYS: "100" } }
    )
    expect(success(wider.exit).totals.granted).toBe(1)
  })
})

describe("Accounts over the memory repositories", () => {
  test("create: a fixed plan's grant is the account's and its opening monthly balance", async () => {
    const { exit, memory } = await runServices(Effect.flatMap(Accounts, (accounts) => accounts.create({ plan: "pro", name: "Studio" })))
    const account = success(exit)
    expect(account).toMatchObject({
      object: "account",
      name: "Studio",
      plan: "pro",
      api_access: true,
      suspended: false,
      monthly_grant: 1_000,
      wallet: { monthly_balance: 1_000, topup_balance: 0, monthly_period_end: "2026-02-15T12:00:00.000Z" }
    })
    expect(memory.ledger.state.journal.map((row) => [row.entryType, row.amount, row.reason])).toEqual([["grant", 1_000, "opening balance"]])
  })

  test("create: another grant than a fixed plan's is refused and nothing is stored; an arrangement sets its own", async () => {
    const { exit } = await runServices((memory) => Effect.gen(function*() {
      const accounts = yield* Accounts
      const refused = yield* Effect.flip(accounts.create({ plan: "pro", monthly_grant: 5 }))
      const storedAfterRefusal = memory.accounts.state.accounts.size + memory.ledger.state.wallets.size
      const custom = yield* accounts.create({ plan: "custom", monthly_grant: 250, topup_balance: 10 })
      return { refused, storedAfterRefusal, custom }
    }))
    const { custom, refused, storedAfterRefusal } = success(exit)
    expect(refused._tag).toBe("ValidationFailed")
    expect(storedAfterRefusal).toBe(0)
    expect(custom).toMatchObject({ plan: "custom", monthly_grant: 250, wallet: { monthly_balance: 250, topup_balance: 10 } })
  })

  test("a plan change starts a new monthly period: unused monthly credits expire, the new grant is credited, the webhook stays", async () => {
    const { exit, memory, planLossDisabled } = await runServices(Effect.gen(function*() {
      const accounts = yield* Accounts
      const { id } = yield* accounts.create({ plan: "pro" })
      yield* Effect.flatMap(Ledger, (ledger) => ledger.charge(id, 100, { operation: "hook" }))
      yield* TestClock.adjust("3 days")
      return yield* accounts.update(id, { plan: "business" })
    }))
    expect(success(exit)).toMatchObject({
      plan: "business",
      monthly_grant: 10_000,
      wallet: { monthly_balance: 10_000, monthly_period_end: "2026-02-18T12:00:00.000Z" }
    })
    expect(memory.ledger.state.journal.filter((row) => row.operation === "rollover").map((row) => [row.entryType, row.amount, row.reason]))
      .toEqual([
        ["expire", -900, "plan changed"],
        ["grant", 10_000, "plan changed"]
      ])
    expect(planLossDisabled).toEqual([])
  })

  test("losing API access disables the account's webhook in the same change", async () => {
    const { exit, planLossDisabled } = await runServices(Effect.gen(function*() {
      const accounts = yield* Accounts
      const { id } = yield* accounts.create({ plan: "pro" })
      return yield* accounts.update(id, { plan: "free" })
    }))
    const account = success(exit)
    expect(account).toMatchObject({ plan: "free", api_access: false, monthly_grant: 0, wallet: { monthly_balance: 0, monthly_period_end: null } })
    expect(planLossDisabled).toEqual([account.id])
  })

  test("when the webhook cannot be disabled the whole change is rolled back: plan, grant and wallet stay as they were", async () => {
    const { exit, memory } = await runServices(
      Effect.gen(function*() {
        const accounts = yield* Accounts
        const { id } = yield* accounts.create({ plan: "pro" })
        const failed = yield* Effect.exit(accounts.update(id, { plan: "free", suspended: true }))
        return { failed, after: yield* accounts.get(id) }
      }),
      { webhookStore: "down" }
    )
    const { after, failed } = success(exit)
    expect(isDefect(failed)).toBe(true)
    expect(after).toMatchObject({ plan: "pro", suspended: false, monthly_grant: 1_000, wallet: { monthly_balance: 1_000 } })
    expect(memory.ledger.state.journal.filter((row) => row.operation === "rollover")).toEqual([])
  })

  test("a suspension is stored, and key lookups see it once their cached answer expires", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const accounts = yield* Accounts
      const auth = yield* Auth
      const { id } = yield* accounts.create({ plan: "pro" })
      const key = yield* accounts.createKey(id, undefined)
      const suspendedOf = Effect.map(auth.findKey(key.api_key), (owner) => Option.getOrThrow(owner).suspended)
      const before = yield* suspendedOf
      const account = yield* accounts.update(id, { suspended: true })
      const cached = yield* suspendedOf
      yield* TestClock.adjust("500 millis")
      return { account, seen: [before, cached, yield* suspendedOf] }
    }))
    const { account, seen } = success(exit)
    expect(account.suspended).toBe(true)
    expect(seen).toEqual([false, false, true])
  })

  test("an admin grant credits once per reference and is listed in the account's transactions", async () => {
    const { exit } = await runServices(Effect.gen(function*() {
      const accounts = yield* Accounts
      const { id } = yield* accounts.create({ plan: "free" })
      const grant = { bucket: "topup", amount: 25, reason: "goodwill", referenceId: "inv_9", requestId: "req_admin" } as const
      const first = yield* accounts.grant(id, grant)
      const repeat = yield* accounts.grant(id, grant)
      return { first, repeat, transactions: yield* accounts.transactions(id, {}) }
    }))
    const { first, repeat, transactions } = success(exit)
    expect([first.topup_balance, repeat.topup_balance]).toEqual([25, 25])
    expect(transactions.data.map((row) => [row.type, row.amount, row.reference, row.reason, row.request_id])).toEqual([
      ["grant", 25, { kind: "admin", id: "inv_9" }, "goodwill", "req_admin"]
    ])
  })

  test("every call on an unknown account answers NotFound and changes nothing", async () => {
    const { exit, memory } = await runServices(Effect.gen(function*() {
      const accounts = yield* Accounts
      const unknown = "acct_unknown"
      return [
        yield* Effect.flip(accounts.get(unknown)),
        yield* Effect.flip(accounts.update(unknown, { suspended: true })),
        yield* Effect.flip(accounts.createKey(unknown, undefined)),
        yield* Effect.flip(accounts.grant(unknown, { bucket: "topup", amount: 1, reason: null, referenceId: null, requestId: "req_x" })),
        yield* Effect.flip(accounts.transactions(unknown, {})),
        yield* Effect.flip(accounts.usage(unknown, {}))
      ].map((error) => error._tag)
    }))
    expect(success(exit)).toEqual(["NotFound", "NotFound", "NotFound", "NotFound", "NotFound", "NotFound"])
    expect([memory.keys.state.keys.size, memory.ledger.state.journal.length, memory.accounts.state.accounts.size]).toEqual([0, 0, 0])
  })
})
