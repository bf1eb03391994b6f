/** Accounts as operators manage them: creation, plan changes and suspension. */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Plan } from "../Auth/Api.js"
import { grantFor, hasApiAccess, planRules } from "../Auth/Plans.js"
import { NotFound, ValidationFailed } from "../Errors.js"
import { newId } from "../Ids.js"
import { Ledger } from "../Ledger/Ledger.js"
import { Webhooks } from "../Webhooks/Webhooks.js"
import type { Account, CreateAccount, UpdateAccount } from "./Api.js"

const AccountRow = Schema.Struct({
  id: Schema.String,
  name: Schema.NullOr(Schema.String),
  plan: Plan,
  suspended: Schema.Boolean,
  monthly_grant: Schema.Number
})

/** A monthly grant is the plan's own, except on the plans that set their own (invite, complimentary, custom). */
const checkGrant = (plan: Plan, monthlyGrant: number | undefined) =>
  monthlyGrant !== undefined && planRules[plan].monthlyGrant !== null && planRules[plan].monthlyGrant !== monthlyGrant
    ? new ValidationFailed({
      message: `monthly_grant: plan ${plan} grants ${planRules[plan].monthlyGrant} credits a month; only invite, complimentary and custom arrangements set their own.`
    })
    : Effect.void

export class Accounts extends Effect.Service<Accounts>()("hookline/Accounts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger
    const webhooks = yield* Webhooks

    const findRow = (id: string, lock: boolean) =>
      sql`SELECT id, name, plan, suspended, monthly_grant FROM accounts WHERE id = ${id} ${lock ? sql`FOR UPDATE` : sql``}`.pipe(
        Effect.flatMap((rows) =>
          rows.length === 0 ? Effect.succeed(Option.none()) : Effect.map(Schema.decodeUnknown(AccountRow)(rows[0]), Option.some)
        ),
        Effect.orDie,
        Effect.flatMap(Option.match({
          onNone: () => new NotFound({ message: `No account ${id}.` }),
          onSome: Effect.succeed
        }))
      )

    const get = (id: string) =>
      Effect.gen(function*() {
        const row = yield* findRow(id, false)
        const wallet = yield* ledger.wallet(id)
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
        yield* Effect.gen(function*() {
          yield* sql`INSERT INTO accounts (id, name, plan, monthly_grant) VALUES (${id}, ${input.name ?? null}, ${input.plan}, ${monthlyGrant})`
          yield* ledger.openWallet(id, {
            monthlyGrant,
            monthlyBalance: input.monthly_balance ?? monthlyGrant,
            topupBalance: input.topup_balance ?? 0
          })
        }).pipe(sql.withTransaction, Effect.orDie)
        return yield* get(id)
      })

    /**
     * Changes plan and/or suspension in one transaction. A plan change starts a new monthly
     * period (Ledger), and losing API access disables the account webhook in the same transaction.
     */
    const update = (id: string, patch: UpdateAccount) =>
      Effect.gen(function*() {
        yield* Effect.gen(function*() {
          const current = yield* findRow(id, true)
          if (patch.suspended !== undefined && patch.suspended !== current.suspended) {
            yield* sql`UPDATE accounts SET suspended = ${patch.suspended}, updated_at = now() WHERE id = ${id}`.pipe(Effect.orDie)
          }
          if (patch.plan !== undefined && patch.plan !== current.plan) {
            const monthlyGrant = planRules[patch.plan].monthlyGrant ??
              (planRules[current.plan].monthlyGrant === null ? current.monthly_grant : grantFor(patch.plan, undefined))
            yield* sql`UPDATE accounts SET plan = ${patch.plan}, monthly_grant = ${monthlyGrant}, updated_at = now() WHERE id = ${id}`
              .pipe(Effect.orDie)
            yield* ledger.startNewPeriod(id, monthlyGrant).pipe(Effect.orDie)
            if (hasApiAccess(current.plan) && !hasApiAccess(patch.plan)) {
              yield* webhooks.disableForAccount(id).pipe(Effect.orDie)
            }
          }
        }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        return yield* get(id)
      })

    return { get, create, update } as const
  }),
  dependencies: [Ledger.Default, Webhooks.Default]
}) {}
