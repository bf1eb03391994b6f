/**
 * Every statement on the money tables (wallets, holds, credit_journal), named for the transition
 * it performs. Each is one SQL statement (data-modifying CTEs) that locks the wallet row first, so
 * its correctness never depends on timing, and writes a journal row for every balance change:
 * for each account and bucket `balance == sum(journal.amount)` holds at all times.
 *
 * Rows are decoded with schemas (SqlSchema); database and decoding failures are defects here, at
 * the boundary, and every statement has its span. The Ledger service decides; this file only
 * moves money as told. RepoMemory.ts offers the same methods in memory, for tests without a database.
 */
import { Context, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, type SqlError, SqlSchema } from "effect/sql"
import { newId } from "../Ids.js"
import { atRepoBoundary, currentDate } from "../Repository.js"
import { Bucket, maxBalance, Operation } from "./Domain.js"
import { type BudgetStatements, budgetStatements } from "./RepoBudgets.js"
import { type GrantStatements, grantStatements } from "./RepoGrants.js"
import { debitStatement, resolveStatement, rolloverStatement, timeParameter } from "./RepoSql.js"

const AccountId = Schema.String

const WalletRow = Schema.Struct({
  monthly_balance: Schema.Number,
  topup_balance: Schema.Number,
  monthly_period_end: Schema.NullOr(Schema.Date),
  /** The soonest expiry among the top-up grants not yet expired; null: none expires. */
  next_grant_expiry: Schema.NullOr(Schema.Date)
})

const Debit = Schema.Struct({
  accountId: AccountId,
  amount: Schema.Int,
  operation: Operation,
  referenceId: Schema.NullOr(Schema.String),
  requestId: Schema.NullOr(Schema.String),
  keyId: Schema.NullOr(Schema.String)
})

const HoldDebit = Schema.Struct({
  ...Debit.fields,
  holdId: Schema.String,
  /** null: the hold never expires. */
  expiresInSeconds: Schema.NullOr(Schema.Number)
})

/**
 * A debit's outcome: balances null when it was refused (nothing changed); `rollover_due` /
 * `expiry_due`: refused because the period ended or a top-up grant is due, to run first; `over_limit` when the
 * key's spend limit refused it (with the limit and the end of the key's period).
 */
const DebitRow = Schema.Struct({
  rollover_due: Schema.Boolean,
  expiry_due: Schema.Boolean,
  monthly_balance: Schema.NullOr(Schema.Number),
  topup_balance: Schema.NullOr(Schema.Number),
  over_limit: Schema.Boolean,
  spend_limit: Schema.NullOr(Schema.Number),
  key_period_end: Schema.NullOr(Schema.Date)
})

export type DebitRow = typeof DebitRow.Type

const Resolve = Schema.Struct({ holdId: Schema.String, charge: Schema.Int })

const ResolveRow = Schema.Struct({
  charged: Schema.Number,
  monthly_balance: Schema.Number,
  topup_balance: Schema.Number,
  operation: Schema.String
})

export type ResolveRow = typeof ResolveRow.Type

const NewPeriod = Schema.Struct({ accountId: AccountId, monthlyGrant: Schema.Int })

/** Reading a wallet, opening one, and its monthly periods. */
const walletStatements = (sql: SqlClient.SqlClient) => {
  const findWallet = SqlSchema.findOneOption({
    Request: AccountId,
    Result: WalletRow,
    execute: (accountId) =>
      sql`SELECT monthly_balance, topup_balance, monthly_period_end, next_grant_expiry FROM wallets WHERE account_id = ${accountId}`
  })

  const rollOver = SqlSchema.findOne({
    Request: Schema.NullOr(AccountId),
    Result: Schema.Struct({ rolled: Schema.Number }),
    execute: (accountId) => Effect.flatMap(currentDate, (now) => rolloverStatement(sql, accountId, now))
  })

  /** An empty wallet; its monthly period starts now when the account has a monthly grant. */
  const openWallet = SqlSchema.void({
    Request: NewPeriod,
    execute: ({ accountId, monthlyGrant }) =>
      Effect.flatMap(currentDate, (now) => {
        const at = timeParameter(sql, now)
        return sql`INSERT INTO wallets (account_id, monthly_balance, topup_balance, period_anchor, monthly_period_end)
          VALUES (${accountId}, 0, 0, ${at}, ${monthlyGrant > 0 ? sql`${at} + interval '1 month'` : null})`
      })
  })

  /** A new monthly period from now: unused monthly credits expire and `monthlyGrant` is credited. */
  const startNewPeriod = SqlSchema.void({
    Request: NewPeriod,
    execute: ({ accountId, monthlyGrant }) =>
      Effect.flatMap(currentDate, (now) => {
        const at = timeParameter(sql, now)
        return sql`
      WITH old AS (
        SELECT monthly_balance AS m, topup_balance AS t FROM wallets WHERE account_id = ${accountId} FOR UPDATE
      ),
      upd AS (
        UPDATE wallets w
           SET monthly_balance = ${monthlyGrant},
               period_anchor = ${at},
               monthly_period_end = ${monthlyGrant > 0 ? sql`${at} + interval '1 month'` : null}
          FROM old WHERE w.account_id = ${accountId}
        RETURNING old.m, old.t
      ),
      journal AS (
        INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reason, created_at)
        SELECT ${newId("txn")}, ${accountId}, 'expire', 'monthly', -m, 0, t, 'rollover', 'plan changed', ${at} FROM upd WHERE m > 0
        UNION ALL
        SELECT ${newId("txn")}, ${accountId}, 'grant', 'monthly', ${monthlyGrant}, ${monthlyGrant}, t, 'rollover', 'plan changed', ${at}
          FROM upd WHERE ${monthlyGrant} > 0
        RETURNING 1
      )
      SELECT count(*)::int AS n FROM upd`
      })
  })

  return {
    findWallet,
    rollOver: (accountId: string | null) => Effect.map(rollOver(accountId), (row) => row.rolled),
    openWallet,
    startNewPeriod
  }
}

/** A hold's life: reserved (or a charge taken at once), then settled, refunded or voided. */
const holdStatements = (sql: SqlClient.SqlClient) => {
  const reserveHold = SqlSchema.findOneOption({
    Request: HoldDebit,
    Result: DebitRow,
    execute: (debit) =>
      Effect.flatMap(currentDate, (now) =>
        debitStatement(sql, debit, now, {
          holdId: debit.holdId,
          expiresAt: debit.expiresInSeconds === null
            ? sql`NULL::timestamptz`
            : sql`${timeParameter(sql, now)} + make_interval(secs => ${debit.expiresInSeconds})`,
          // A hold that expires is a metered request's, settled or refunded before it answers (or
          // by the sweeper); one that does not is a prediction's, the record of an accepted job.
          commitWithoutFlush: debit.expiresInSeconds !== null
        }))
  })

  const chargeAtOnce = SqlSchema.findOneOption({
    Request: Debit,
    Result: DebitRow,
    execute: (debit) => Effect.flatMap(currentDate, (now) => debitStatement(sql, debit, now, null))
  })

  const resolveAs = (status: "settled" | "refunded" | "voided") =>
    SqlSchema.findOneOption({
      Request: Resolve,
      Result: ResolveRow,
      execute: ({ charge, holdId }) => Effect.flatMap(currentDate, (now) => resolveStatement(sql, holdId, charge, status, now))
    })

  const expiredHoldIds = SqlSchema.findAll({
    Request: Schema.Int,
    Result: Schema.Struct({ id: Schema.String }),
    execute: (limit) =>
      Effect.flatMap(currentDate, (now) =>
        sql`SELECT id FROM holds WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ${timeParameter(sql, now)}
             ORDER BY expires_at LIMIT ${limit}`)
  })

  /** The first refusal since a grant sends wallet.depleted (migration 0007's function decides). */
  const noteDepleted = SqlSchema.void({
    Request: AccountId,
    execute: (accountId) => sql`SELECT hookline_wallet_depleted(${accountId})`
  })

  return {
    reserveHold,
    chargeAtOnce,
    settleHold: resolveAs("settled"),
    refundHold: (holdId: string) => resolveAs("refunded")({ holdId, charge: 0 }),
    voidHold: (holdId: string) => resolveAs("voided")({ holdId, charge: 0 }),
    expiredHoldIds: (limit: number) => Effect.map(expiredHoldIds(limit), (rows) => rows.map((row) => row.id)),
    noteDepleted
  }
}

/** The statements on the money tables, as the Ledger, its services and the tests' in-memory twin (RepoMemory.ts) use them. */
export interface LedgerRepoService extends GrantStatements, BudgetStatements {
  readonly findWallet: (accountId: string) => Effect.Effect<Option.Option<typeof WalletRow.Type>>
  /** Ends the monthly periods that are over, for every wallet (null) or one; how many rolled over. */
  readonly rollOver: (accountId: string | null) => Effect.Effect<number>
  /** An empty wallet; its monthly period starts now when the account has a monthly grant. */
  readonly openWallet: (period: typeof NewPeriod.Type) => Effect.Effect<void>
  /** A new monthly period from now: unused monthly credits expire and `monthlyGrant` is credited. */
  readonly startNewPeriod: (period: typeof NewPeriod.Type) => Effect.Effect<void>
  /** Takes the amount into a pending hold, or tells why not (DebitRow); None: no wallet. */
  readonly reserveHold: (debit: typeof HoldDebit.Type) => Effect.Effect<Option.Option<DebitRow>>
  /** Takes the amount at once, with no hold, or tells why not (DebitRow); None: no wallet. */
  readonly chargeAtOnce: (debit: typeof Debit.Type) => Effect.Effect<Option.Option<DebitRow>>
  /** Posts `charge` of a pending hold and releases the rest; None when it was not pending. */
  readonly settleHold: (resolve: typeof Resolve.Type) => Effect.Effect<Option.Option<ResolveRow>>
  readonly refundHold: (holdId: string) => Effect.Effect<Option.Option<ResolveRow>>
  readonly voidHold: (holdId: string) => Effect.Effect<Option.Option<ResolveRow>>
  /** Up to `limit` pending holds past their expiry, oldest expiry first. */
  readonly expiredHoldIds: (limit: number) => Effect.Effect<ReadonlyArray<string>>
  /** The first refusal since a grant sends wallet.depleted. */
  readonly noteDepleted: (accountId: string) => Effect.Effect<void>
  /** Runs `effect` in one transaction (or as a savepoint in the caller's). */
  readonly withTransaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError.SqlError, R>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  return LedgerRepo.of({
    ...atRepoBoundary("LedgerRepo", {
      ...walletStatements(sql),
      ...holdStatements(sql),
      ...grantStatements(sql),
      ...budgetStatements(sql)
    }),
    withTransaction: sql.withTransaction
  })
})

export class LedgerRepo extends Context.Service<LedgerRepo, LedgerRepoService>()("hookline/LedgerRepo") {
  static readonly layer = Layer.effect(LedgerRepo, make)
}
