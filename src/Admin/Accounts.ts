/**
 * Accounts as operators manage them: creation, plan changes and suspension, and every admin call
 * on one account's keys, credits and history, each after checking the account exists (404).
 */
import { Context, Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql"
import { Auth } from "../Auth/Auth.js"
import type { Plan, Scope } from "../Auth/Domain.js"
import { grantFor, hasApiAccess, planRules } from "../Auth/Plans.js"
import { type InvalidCursor, NotFound, ValidationFailed } from "../Errors.js"
import { answerInTransaction } from "../Idempotency/Headers.js"
import { newId } from "../Ids.js"
import { type CreditTransactionList, type TransactionParams, type UsageParams, type UsageSummary, type Wallet, walletOf } from "../Ledger/Api.js"
import type { Bucket } from "../Ledger/Domain.js"
import { KeyBudgets } from "../Ledger/Budgets.js"
import { CreditHistory } from "../Ledger/History.js"
import { Ledger } from "../Ledger/Ledger.js"
import { Usage } from "../Ledger/Usage.js"
import { Webhooks } from "../Webhooks/Webhooks.js"
import type { Account, ApiKeyCreated, CreateAccount, UpdateAccount } from "./Api.js"
import { AccountsRepo } from "./Repo.js"

/** A monthly grant is the plan's own, except on the plans that set their own (invite, complimentary, custom). */
const checkGrant = (plan: Plan, monthlyGrant: number | undefined) =>
  monthlyGrant !== undefined && planRules[plan].monthlyGrant !== null && planRules[plan].monthlyGrant !== monthlyGrant
    ? new ValidationFailed({
      message: `monthly_grant: plan ${plan} grants ${planRules[plan].monthlyGrant} credits a month; only invite, complimentary and custom arrangements set their own.`
    })
    : Effect.void

/** An account's keys, credits and reports, for the admin API: each answers 404 for an unknown account. */
/** An admin grant's terms. */
export interface AdminGrant {
  readonly bucket: Bucket
  readonly amount: number
  readonly expiresAt?: Date | null
  readonly reason: string | null
  readonly referenceId: string | null
  readonly requestId: string
}

/**
 * The admin API's accounts. Each call on an account that does not exist is NotFound and changes
 * nothing; a write stores its answer under its Idempotency-Key in its own transaction.
 */
export interface AccountsService {
  /** The account with its plan, suspension and wallet. */
  readonly get: (id: string) => Effect.Effect<Account, NotFound>
  /** A new account and its wallet; ValidationFailed when the plan does not allow the monthly grant asked for. */
  readonly create: (input: CreateAccount) => Effect.Effect<Account, ValidationFailed>
  /**
   * Changes plan and/or suspension in one transaction. A plan change starts a new monthly
   * period (Ledger), and losing API access disables the account webhook in the same transaction.
   */
  readonly update: (id: string, patch: UpdateAccount) => Effect.Effect<Account, NotFound>
  /** A new API key (secret shown once) with its spend limit, if any, set in the same transaction. */
  readonly createKey: (id: string, scopes: ReadonlyArray<Scope> | undefined, spendLimit?: number) => Effect.Effect<ApiKeyCreated, NotFound>
  /** Credits granted to a bucket, once per reference; ValidationFailed for an amount or expiry the Ledger refuses. */
  readonly grant: (id: string, grant: AdminGrant) => Effect.Effect<Wallet, NotFound | ValidationFailed>
  /** A page of the account's credit history; InvalidCursor for a cursor not made by this route with these filters. */
  readonly transactions: (id: string, query: TransactionParams) => Effect.Effect<CreditTransactionList, NotFound | InvalidCursor>
  /** The account's usage summary; ValidationFailed for a range the summary refuses. */
  readonly usage: (id: string, query: UsageParams) => Effect.Effect<UsageSummary, NotFound | ValidationFailed>
}

const perAccount = (findRow: (id: string, lock: boolean) => Effect.Effect<unknown, NotFound>) =>
  Effect.gen(function*() {
    const auth = yield* Auth
    const ledger = yield* Ledger
    const history = yield* CreditHistory
    const usage = yield* Usage
    const budgets = yield* KeyBudgets
    const sql = yield* SqlClient.SqlClient
    const mustExist = (id: string) => Effect.asVoid(findRow(id, false))
    /** The key and its limit in one transaction: a key is never created without the limit asked for. */
    const newKey = (id: string, scopes: ReadonlyArray<Scope> | undefined, spendLimit: number | undefined) =>
      Effect.gen(function*() {
        const created = yield* auth.createKey(id, scopes)
        if (spendLimit !== undefined) yield* budgets.setLimit(created.id, spendLimit)
        return yield* answerInTransaction({ ...created, spend_limit: spendLimit ?? null })
      }).pipe(sql.withTransaction, Effect.orDie)
    return {
      createKey: (id: string, scopes: ReadonlyArray<Scope> | undefined, spendLimit?: number) =>
        mustExist(id).pipe(Effect.andThen(newKey(id, scopes, spendLimit))),
      grant: (id: string, grant: AdminGrant) =>
        mustExist(id).pipe(
          Effect.andThen(ledger.grant(id, grant.bucket, grant.amount, grant)),
          Effect.flatMap((wallet) => answerInTransaction(walletOf(wallet))),
          // The grant, the wallet it answers and that answer under its Idempotency-Key commit together.
          sql.withTransaction,
          Effect.catchTag("SqlError", Effect.die)
        ),
      transactions: (id: string, query: TransactionParams) =>
        mustExist(id).pipe(Effect.andThen(history.list(id, query, "admin.transactions"))),
      usage: (id: string, query: UsageParams) => mustExist(id).pipe(Effect.andThen(usage.summarise(id, query)))
    }
  })

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const repo = yield* AccountsRepo
  const ledger = yield* Ledger
  const webhooks = yield* Webhooks

  const findRow = (id: string, lock: boolean) =>
    Effect.flatMap(repo.findAccount(id, lock), Option.match({
      onNone: () => new NotFound({ message: `No account ${id}.` }),
      onSome: Effect.succeed
    }))

  const get = (id: string) =>
    Effect.gen(function*() {
      const row = yield* findRow(id, false)
      const wallet = walletOf(yield* ledger.wallet(id))
      return {
        object: "account",
        id: row.id,
        name: row.name,
        plan: row.plan,
        api_access: hasApiAccess(row.plan),
        suspended: row.suspended,
        monthly_grant: row.monthly_grant,
        wallet
      } satisfies Account
    })

  const create = (input: CreateAccount) =>
    Effect.gen(function*() {
      yield* checkGrant(input.plan, input.monthly_grant)
      const id = newId("acct")
      const monthlyGrant = grantFor(input.plan, input.monthly_grant)
      // The account, its wallet and the answer under its Idempotency-Key commit together.
      return yield* Effect.gen(function*() {
        yield* repo.insertAccount({ id, name: input.name ?? null, plan: input.plan, monthlyGrant })
        yield* ledger.openWallet(id, {
          monthlyGrant,
          monthlyBalance: input.monthly_balance ?? monthlyGrant,
          topupBalance: input.topup_balance ?? 0
        })
        return yield* answerInTransaction(yield* get(id))
      }).pipe(sql.withTransaction, Effect.orDie)
    })

  const update = (id: string, patch: UpdateAccount) =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const current = yield* findRow(id, true)
        if (patch.suspended !== undefined && patch.suspended !== current.suspended) {
          yield* repo.setSuspended(id, patch.suspended)
        }
        if (patch.plan !== undefined && patch.plan !== current.plan) {
          const monthlyGrant = planRules[patch.plan].monthlyGrant ??
            (planRules[current.plan].monthlyGrant === null ? current.monthly_grant : grantFor(patch.plan, undefined))
          yield* repo.changePlan(id, patch.plan, monthlyGrant)
          yield* ledger.startNewPeriod(id, monthlyGrant).pipe(Effect.orDie)
          if (hasApiAccess(current.plan) && !hasApiAccess(patch.plan)) {
            yield* webhooks.disableForAccount(id).pipe(Effect.orDie)
          }
        }
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
      return yield* get(id)
    })

  return Accounts.of({ get, create, update, ...(yield* perAccount(findRow)) })
})

export class Accounts extends Context.Service<Accounts, AccountsService>()("hookline/Accounts") {
  static readonly layerWithoutDependencies = Layer.effect(Accounts, make)
  static readonly layer = Accounts.layerWithoutDependencies.pipe(
    Layer.provide([AccountsRepo.layer, Ledger.layer, Webhooks.layer, Auth.layer, CreditHistory.layer, Usage.layer, KeyBudgets.layer])
  )
}
