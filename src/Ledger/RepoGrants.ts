/**
 * LedgerRepo's statements on grants: crediting a bucket (a top-up grant becomes a row of
 * `topup_grants`, with its expiry), reading a grant back by its billing reference, expiring the
 * grants that are due, and listing the live ones. Each writes under the wallet row's lock, as
 * every statement on the money tables does (Repo.ts), and journals every balance change.
 */
import { Effect, type Option, Schema } from "effect"
import { type SqlClient, SqlSchema } from "effect/sql"
import { newId } from "../Ids.js"
import { currentDate } from "../Repository.js"
import { Bucket, maxBalance } from "./Domain.js"
import { timeParameter } from "./RepoSql.js"

const Grant = Schema.Struct({
  accountId: Schema.String,
  bucket: Bucket,
  amount: Schema.Int,
  /** Top-up only; null or absent: never expires. */
  expiresAt: Schema.optionalKey(Schema.NullOr(Schema.Date)),
  reason: Schema.NullOr(Schema.String),
  referenceId: Schema.NullOr(Schema.String),
  requestId: Schema.NullOr(Schema.String)
})

const GrantRow = Schema.Struct({ found: Schema.Number, granted: Schema.Number, overflow: Schema.Number })

const EarlierGrant = Schema.Struct({ bucket: Bucket, amount: Schema.Number, expires_at: Schema.NullOr(Schema.Date) })

export const TopupGrantRow = Schema.Struct({
  id: Schema.String,
  amount: Schema.Number,
  remaining: Schema.Number,
  expires_at: Schema.NullOr(Schema.Date),
  created_at: Schema.Date
})
export type TopupGrantRow = typeof TopupGrantRow.Type

const GrantPage = Schema.Struct({ accountId: Schema.String, limit: Schema.Int })

/** LedgerRepo's statements on grants, past its boundary (Repo.ts). */
export interface GrantStatements {
  /**
   * Credits one bucket, journaled. `found` 0: no wallet; `overflow` 1: a balance would pass
   * maxBalance; `granted` 0 otherwise: the reference was credited before. Nothing changed in all three.
   */
  readonly grant: (grant: typeof Grant.Type) => Effect.Effect<typeof GrantRow.Type>
  /** The admin grant credited under the account's billing reference. */
  readonly findGrantByReference: (
    reference: { readonly accountId: string; readonly referenceId: string }
  ) => Effect.Effect<Option.Option<typeof EarlierGrant.Type>>
  /** Expires the account's top-up grants that are due; how many. */
  readonly expireGrants: (accountId: string) => Effect.Effect<number>
  /** Up to `limit` accounts with a top-up grant due to expire, soonest first. */
  readonly accountsWithGrantsDue: (limit: number) => Effect.Effect<ReadonlyArray<string>>
  /** Up to `limit` live top-up grants (credits left, not expired), in the order they are spent. */
  readonly liveGrants: (accountId: string, limit: number) => Effect.Effect<ReadonlyArray<TopupGrantRow>>
}

/** Crediting a bucket, and reading a grant back by its billing reference. */
const creditStatements = (sql: SqlClient.SqlClient) => {
  /**
   * Adds credits to one bucket, journaled; a top-up grant is also a row of its own (what is left
   * of it, its expiry), and the wallet's next expiry moves to it when it is sooner. A
   * `referenceId` credits at most once per account: the journal's unique index decides
   * atomically. A balance passing maxBalance credits nothing.
   */
  const grant = SqlSchema.findOne({
    Request: Grant,
    Result: GrantRow,
    execute: (g) =>
      Effect.flatMap(currentDate, (now) => {
        const at = timeParameter(sql, now)
        const toMonthly = g.bucket === "monthly" ? g.amount : 0
        const toTopup = g.bucket === "topup" ? g.amount : 0
        const grantId = g.bucket === "topup" ? newId("grant") : null
        const expiresAt = sql`${g.bucket === "topup" ? g.expiresAt ?? null : null}::timestamptz`
        return sql`
        WITH old AS (
          SELECT monthly_balance AS m, topup_balance AS t FROM wallets WHERE account_id = ${g.accountId} FOR UPDATE
        ),
        journal AS (
          INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reference_id, request_id, reason,
                                      grant_id, created_at)
          SELECT ${newId("txn")}, ${g.accountId}, 'grant', ${g.bucket}, ${g.amount}, m + ${toMonthly}, t + ${toTopup},
                 'admin', ${g.referenceId}, ${g.requestId}, ${g.reason}, ${grantId}, ${at}
            FROM old WHERE m + ${toMonthly} <= ${maxBalance} AND t + ${toTopup} <= ${maxBalance}
          ON CONFLICT (account_id, reference_id)
            WHERE entry_type = 'grant' AND operation = 'admin' AND reference_id IS NOT NULL
            DO NOTHING
          RETURNING 1
        ),
        topup AS (
          INSERT INTO topup_grants (id, account_id, amount, remaining, expires_at, created_at)
          SELECT ${grantId}, ${g.accountId}, ${g.amount}, ${g.amount}, ${expiresAt}, ${at}
           WHERE ${grantId}::text IS NOT NULL AND EXISTS (SELECT 1 FROM journal)
          RETURNING 1
        ),
        w AS (
          UPDATE wallets
             SET monthly_balance = monthly_balance + ${toMonthly}, topup_balance = topup_balance + ${toTopup},
                 next_grant_expiry = LEAST(next_grant_expiry, ${expiresAt})
           WHERE account_id = ${g.accountId} AND EXISTS (SELECT 1 FROM journal)
          RETURNING 1
        )
        SELECT (SELECT count(*) FROM old)::int AS found, (SELECT count(*) FROM w)::int AS granted,
               (SELECT count(*) FROM old WHERE m + ${toMonthly} > ${maxBalance} OR t + ${toTopup} > ${maxBalance})::int AS overflow`
      })
  })

  const findGrantByReference = SqlSchema.findOneOption({
    Request: Schema.Struct({ accountId: Schema.String, referenceId: Schema.String }),
    Result: EarlierGrant,
    execute: ({ accountId, referenceId }) =>
      sql`SELECT j.bucket, j.amount, g.expires_at FROM credit_journal j LEFT JOIN topup_grants g ON g.id = j.grant_id
           WHERE j.account_id = ${accountId} AND j.reference_id = ${referenceId}
             AND j.entry_type = 'grant' AND j.operation = 'admin'`
  })

  return { grant, findGrantByReference }
}

/** Expiring the grants that are due, and listing the live ones. */
const expiryStatements = (sql: SqlClient.SqlClient) => {
  /**
   * Expires the account's top-up grants that are due: what remains of each leaves the top-up
   * balance through an `expire` row (its reference the grant's id), the grant is marked expired
   * and the wallet's next expiry moves on. The wallet row is locked by a first statement, so the
   * second reads the grants as they are under that lock. One transaction: a crash leaves all of
   * it or none, and a second run finds nothing due. Answers how many grants expired.
   */
  const expireGrants = (accountId: string) =>
    Effect.flatMap(currentDate, (now) => {
      const at = timeParameter(sql, now)
      return sql.withTransaction(Effect.gen(function*() {
        yield* sql`SELECT 1 FROM wallets WHERE account_id = ${accountId} FOR UPDATE`
        const rows = yield* sql<{ readonly expired: number }>`
          WITH due AS (
            SELECT id, remaining, sum(remaining) OVER (ORDER BY expires_at, created_at, id) AS upto
              FROM topup_grants WHERE account_id = ${accountId} AND expired_at IS NULL AND expires_at <= ${at}
          ),
          gone AS (
            UPDATE topup_grants g SET remaining = 0, expired_at = ${at} FROM due WHERE g.id = due.id RETURNING g.id
          ),
          w AS (
            UPDATE wallets
               SET topup_balance = topup_balance - (SELECT COALESCE(sum(remaining), 0) FROM due),
                   next_grant_expiry = (SELECT min(expires_at) FROM topup_grants
                                         WHERE account_id = ${accountId} AND expired_at IS NULL AND expires_at > ${at})
             WHERE account_id = ${accountId}
            RETURNING monthly_balance, topup_balance, topup_balance + (SELECT COALESCE(sum(remaining), 0) FROM due) AS topup_before
          ),
          journal AS (
            INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reference_id, reason,
                                        grant_id, created_at)
            SELECT 'txn_' || replace(gen_random_uuid()::text, '-', ''), ${accountId}, 'expire', 'topup', -d.remaining, w.monthly_balance,
                   w.topup_before - d.upto, 'admin', d.id, 'top-up grant expired', d.id, ${at}
              FROM due d, w WHERE d.remaining > 0
             ORDER BY d.upto
            RETURNING 1
          )
          SELECT count(*)::int AS expired FROM gone`
        return rows[0]?.expired ?? 0
      }))
    })

  /** Accounts with a top-up grant due to expire, soonest first. */
  const accountsWithGrantsDue = (limit: number) =>
    Effect.flatMap(currentDate, (now) =>
      Effect.map(
        sql<{ readonly account_id: string }>`
          SELECT account_id FROM wallets WHERE next_grant_expiry <= ${timeParameter(sql, now)}
           ORDER BY next_grant_expiry LIMIT ${limit}`,
        (rows) => rows.map((row) => row.account_id)
      ))

  /** Up to `limit` live top-up grants (credits left, not expired), in the order they are spent. */
  const liveGrants = SqlSchema.findAll({
    Request: GrantPage,
    Result: TopupGrantRow,
    execute: ({ accountId, limit }) =>
      sql`SELECT id, amount, remaining, expires_at, created_at FROM topup_grants
           WHERE account_id = ${accountId} AND expired_at IS NULL AND remaining > 0
           ORDER BY expires_at, created_at, id LIMIT ${limit}`
  })

  return {
    expireGrants,
    accountsWithGrantsDue,
    liveGrants: (accountId: string, limit: number) => liveGrants({ accountId, limit })
  }
}

export const grantStatements = (sql: SqlClient.SqlClient) => ({ ...creditStatements(sql), ...expiryStatements(sql) })
