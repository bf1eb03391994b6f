/**
 * The Ledger's reports, read from the money tables: the credit history (the journal as a caller
 * reconciles it, see History.ts) and the usage summary (the journal aggregated, see Usage.ts).
 * Read-only; the statements that move money are LedgerRepo's.
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import { SqlClient, type SqlConnection, type Statement } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"
import { TransactionReferenceKind, type TransactionParams, TransactionType, type UsageGroupBy } from "./Api.js"
import { Bucket } from "./Domain.js"

/** Where a history page ended: the last row's position (a journal seq) and its bucket order. */
export const Position = Schema.Struct({ seq: Schema.Int, ord: Schema.Int })
export type Position = typeof Position.Type

export const HistoryRow = Schema.Struct({
  pos: Schema.Number,
  ord: Schema.Number,
  id: Schema.String,
  type: TransactionType,
  bucket: Bucket,
  amount: Schema.Number,
  monthly_after: Schema.Number,
  topup_after: Schema.Number,
  created_at: Schema.Date,
  request_id: Schema.NullOr(Schema.String),
  kind: TransactionReferenceKind,
  reference_id: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String)
})
export type HistoryRow = typeof HistoryRow.Type

type Filters = Pick<TransactionParams, "type" | "created[gte]" | "created[lte]">

/** The rows strictly after `after` in (seq, ord) descending order. */
const beyond = (sql: SqlClient.SqlClient, after: Option.Option<Position>, seq: Statement.Fragment, ord: Statement.Fragment) =>
  Option.match(after, {
    onNone: () => sql``,
    onSome: (position) => sql`AND ${seq} <= ${position.seq} AND (${seq} < ${position.seq} OR ${ord} < ${position.ord})`
  })

const filtered = (sql: SqlClient.SqlClient, filters: Filters, type: Statement.Fragment, createdAt: Statement.Fragment) =>
  sql`${filters.type === undefined ? sql`` : sql`AND ${type} = ${filters.type}`}
      ${filters["created[gte]"] === undefined ? sql`` : sql`AND ${createdAt} >= ${filters["created[gte]"]}`}
      ${filters["created[lte]"] === undefined ? sql`` : sql`AND ${createdAt} <= ${filters["created[lte]"]}`}`

/**
 * One page of history rows, newest first. Two index walks, each stopping after a page:
 * the journal rows listed as they stand (grants, expiries, charges taken at once, a
 * prediction's reserve and refund: the partial index `credit_journal_history`), and the settled
 * request holds (`holds_history`), one row per bucket they took from. Holds that took nothing
 * (an empty page, a refund) are in neither index, so they cost a page nothing to skip.
 */
export const historyPage = (
  sql: SqlClient.SqlClient,
  accountId: string,
  filters: Filters,
  after: Option.Option<Position>,
  limit: number
) => sql`
  SELECT * FROM (
    (SELECT j.seq AS pos, 0 AS ord, j.id, t.type, j.bucket, j.amount, j.monthly_after, j.topup_after,
            j.created_at, j.request_id, j.operation AS kind, j.reference_id, j.reason
       FROM credit_journal j
       CROSS JOIN LATERAL (
         SELECT CASE j.entry_type WHEN 'grant' THEN 'grant' WHEN 'expire' THEN 'expiry'
                                  WHEN 'reserve' THEN 'charge' ELSE 'refund' END AS type
       ) t
      WHERE j.account_id = ${accountId}
        AND (j.hold_id IS NULL OR j.operation = 'prediction' OR j.entry_type = 'expire')
        ${beyond(sql, after, sql`j.seq`, sql`0`)}
        ${filtered(sql, filters, sql`t.type`, sql`j.created_at`)}
      ORDER BY j.seq DESC
      LIMIT ${limit + 1})
    UNION ALL
    (SELECT h.history_seq AS pos, b.ord, r.id, 'charge' AS type, b.bucket, -b.amount, last.monthly_after, last.topup_after,
            h.resolved_at AS created_at, h.request_id, h.operation AS kind, h.reference_id, NULL::text AS reason
       FROM (
         -- A hold gives one or two rows; one (the cursor's) may be partly before the page.
         SELECT * FROM holds
          WHERE account_id = ${accountId} AND history_seq IS NOT NULL
            ${Option.match(after, { onNone: () => sql``, onSome: (position) => sql`AND history_seq <= ${position.seq}` })}
            ${filtered(sql, filters, sql`'charge'`, sql`resolved_at`)}
          ORDER BY history_seq DESC
          LIMIT ${limit + 2}
       ) h
       CROSS JOIN LATERAL (VALUES (1, 'monthly', h.settled_monthly), (2, 'topup', h.settled_topup)) AS b (ord, bucket, amount)
       CROSS JOIN LATERAL (
         SELECT x.id FROM credit_journal x
          WHERE x.hold_id = h.id AND x.entry_type = 'reserve' AND x.bucket = b.bucket LIMIT 1
       ) r
       CROSS JOIN LATERAL (
         SELECT x.monthly_after, x.topup_after FROM credit_journal x WHERE x.hold_id = h.id ORDER BY x.seq DESC LIMIT 1
       ) last
      WHERE b.amount > 0
        ${beyond(sql, after, sql`h.history_seq`, sql`b.ord`)}
      ORDER BY h.history_seq DESC, b.ord DESC
      LIMIT ${limit + 1})
  ) page
  ORDER BY pos DESC, ord DESC
  LIMIT ${limit + 1}
`

export const UsageRow = Schema.Struct({
  key: Schema.String,
  spent: Schema.Number,
  refunded: Schema.Number,
  granted: Schema.Number,
  expired: Schema.Number,
  net: Schema.Number
})
export type UsageRow = typeof UsageRow.Type

/** The one query behind a usage summary (bench/usage.ts explains it as it is). */
export const usageStatement = (sql: SqlClient.SqlClient, accountId: string, from: Date, to: Date, groupBy: UsageGroupBy) => {
  // Grouped by the expression migration 0007 keeps statistics on (so the groups are hashed).
  const group = groupBy === "day"
    ? sql`(created_at AT TIME ZONE 'UTC')::date`
    : groupBy === "key"
    ? sql`COALESCE(key_id, 'none')`
    : sql`CASE operation WHEN 'hook' THEN 'get' WHEN 'prediction' THEN 'predict' ELSE COALESCE(operation, 'other') END`
  return sql`
    SELECT ${groupBy === "day" ? sql`to_char(${group}, 'YYYY-MM-DD')` : group} AS key,
           COALESCE(-sum(amount) FILTER (WHERE entry_type = 'reserve'
             OR (entry_type = 'release' AND operation IS DISTINCT FROM 'prediction')), 0) AS spent,
           COALESCE(sum(amount) FILTER (WHERE entry_type = 'release' AND operation = 'prediction'), 0) AS refunded,
           COALESCE(sum(amount) FILTER (WHERE entry_type = 'grant'), 0) AS granted,
           COALESCE(-sum(amount) FILTER (WHERE entry_type = 'expire'), 0) AS expired,
           sum(amount) AS net
      FROM credit_journal
     WHERE account_id = ${accountId} AND created_at >= ${from} AND created_at < ${to}
     GROUP BY ${group}
     ORDER BY 1`
}

/** The Ledger's reports, as CreditHistory, Usage, the usage benchmark and the tests' in-memory twin use them. */
export interface HistoryRepoService {
  /** Up to `limit + 1` history rows after `after`, newest first (one more: there is a next page). */
  readonly historyPage: (
    accountId: string,
    filters: Filters,
    after: Option.Option<Position>,
    limit: number
  ) => Effect.Effect<ReadonlyArray<HistoryRow>>
  /** The usage rows of [from, to), one per group. */
  readonly usageRows: (accountId: string, from: Date, to: Date, groupBy: UsageGroupBy) => Effect.Effect<ReadonlyArray<UsageRow>>
  /** The usage statement itself, not run: for EXPLAIN (bench/usage.ts). */
  readonly usageStatement: (accountId: string, from: Date, to: Date, groupBy: UsageGroupBy) => Statement.Statement<SqlConnection.Row>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const decodeHistory = Schema.decodeUnknownEffect(Schema.Array(HistoryRow))
  const decodeUsage = Schema.decodeUnknownEffect(Schema.Array(UsageRow))
  const statements = atRepoBoundary("HistoryRepo", {
    historyPage: (accountId: string, filters: Filters, after: Option.Option<Position>, limit: number) =>
      Effect.flatMap(historyPage(sql, accountId, filters, after, limit), decodeHistory),
    usageRows: (accountId: string, from: Date, to: Date, groupBy: UsageGroupBy) =>
      Effect.flatMap(usageStatement(sql, accountId, from, to, groupBy), decodeUsage)
  })
  return HistoryRepo.of({
    historyPage: statements.historyPage,
    usageRows: statements.usageRows,
    usageStatement: (accountId, from, to, groupBy) => usageStatement(sql, accountId, from, to, groupBy)
  })
})

export class HistoryRepo extends Context.Service<HistoryRepo, HistoryRepoService>()("hookline/HistoryRepo") {
  static readonly layer = Layer.effect(HistoryRepo, make)
}
