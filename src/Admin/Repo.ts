/**
 * Every statement on `accounts`, named for what it does. Wallet rows belong to the Ledger; this
 * room holds the account's own fields. Database and decoding failures are defects.
 */
import { Context, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import { Plan } from "../Auth/Domain.js"
import { atRepoBoundary } from "../Repository.js"

export const AccountRow = Schema.Struct({
  id: Schema.String,
  name: Schema.NullOr(Schema.String),
  plan: Plan,
  suspended: Schema.Boolean,
  monthly_grant: Schema.Number
})
export type AccountRow = typeof AccountRow.Type

const AccountLookup = Schema.Struct({ id: Schema.String, lock: Schema.Boolean })
const NewAccount = Schema.Struct({ id: Schema.String, name: Schema.NullOr(Schema.String), plan: Plan, monthlyGrant: Schema.Number })
const Suspension = Schema.Struct({ id: Schema.String, suspended: Schema.Boolean })
const PlanChange = Schema.Struct({ id: Schema.String, plan: Plan, monthlyGrant: Schema.Number })

/** The statements on `accounts`, as the Accounts service and the tests' in-memory twin offer them. */
export interface AccountsRepoService {
  /** The account, row-locked until the transaction ends when `lock` is set. */
  readonly findAccount: (id: string, lock: boolean) => Effect.Effect<Option.Option<AccountRow>>
  readonly insertAccount: (account: typeof NewAccount.Type) => Effect.Effect<void>
  readonly setSuspended: (id: string, suspended: boolean) => Effect.Effect<void>
  readonly changePlan: (id: string, plan: Plan, monthlyGrant: number) => Effect.Effect<void>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const findAccount = SqlSchema.findOneOption({
    Request: AccountLookup,
    Result: AccountRow,
    execute: ({ id, lock }) =>
      sql`SELECT id, name, plan, suspended, monthly_grant FROM accounts WHERE id = ${id} ${lock ? sql`FOR UPDATE` : sql``}`
  })

  const insertAccount = SqlSchema.void({
    Request: NewAccount,
    execute: ({ id, monthlyGrant, name, plan }) =>
      sql`INSERT INTO accounts (id, name, plan, monthly_grant) VALUES (${id}, ${name}, ${plan}, ${monthlyGrant})`
  })

  const setSuspended = SqlSchema.void({
    Request: Suspension,
    execute: ({ id, suspended }) => sql`UPDATE accounts SET suspended = ${suspended}, updated_at = now() WHERE id = ${id}`
  })

  const changePlan = SqlSchema.void({
    Request: PlanChange,
    execute: ({ id, monthlyGrant, plan }) =>
      sql`UPDATE accounts SET plan = ${plan}, monthly_grant = ${monthlyGrant}, updated_at = now() WHERE id = ${id}`
  })

  return atRepoBoundary("AccountsRepo", {
    findAccount: (id: string, lock: boolean) => findAccount({ id, lock }),
    insertAccount,
    setSuspended: (id: string, suspended: boolean) => setSuspended({ id, suspended }),
    changePlan: (id: string, plan: Plan, monthlyGrant: number) => changePlan({ id, plan, monthlyGrant })
  })
})

export class AccountsRepo extends Context.Service<AccountsRepo, AccountsRepoService>()("hookline/AccountsRepo") {
  static readonly layer = Layer.effect(AccountsRepo, make)
}
