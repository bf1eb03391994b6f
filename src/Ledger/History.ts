/**
 * The credit history: the journal as a caller reconciles it, newest first.
 *
 * The journal records holds as reserve and release rows per bucket; the history shows what a
 * caller was told instead:
 * - a request's hold (search, list, get) is ONE `charge` per bucket it finally took from, with
 *   the amount it settled for, placed at the hold's last journal row (its settle) and carrying
 *   that row's balances, so it matches the X-Credits-Charged and X-Credits-Remaining the request
 *   answered with. A hold still pending is not listed yet; one refunded, voided or settled for 0
 *   changed nothing and is never listed.
 * - a prediction's hold outlives its request, which reported `X-Credits-Charged: 20` when it
 *   reserved: its reserve rows are `charge`s at once and its release rows (a failed prediction)
 *   are `refund`s.
 * - grants are `grant`, monthly credits lost at a rollover are `expiry`.
 * So for every account the amounts sum to the balances (once no request is in flight).
 *
 * Pages are keyset pages over (journal seq, bucket order), so rows added while a caller pages
 * land before its first page and never shift the pages after it.
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import { Secrets } from "../Config.js"
import { keysetPage, readCursor, signCursor } from "../Cursor.js"
import { traced } from "../Observability/Tracing.js"
import { orDieOnDb } from "../Sql.js"
import { toTimestamp } from "../Schemas.js"
import {
  type CreditTransaction,
  type CreditTransactionList,
  TransactionReferenceKind,
  type TransactionParams,
  TransactionType
} from "./Api.js"
import { Bucket } from "./Domain.js"

export const defaultPageSize = 50

/** Where the previous page ended: the last row's position (a journal seq) and its bucket order. */
export const Position = Schema.Struct({ seq: Schema.Int, ord: Schema.Int })
export type Position = typeof Position.Type

const HistoryRow = Schema.Struct({
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
type HistoryRow = typeof HistoryRow.Type

const toTransaction = (row: HistoryRow): CreditTransaction => ({
  object: "credit_transaction",
  id: row.id,
  type: row.type,
  bucket: row.bucket,
  amount: row.amount,
  balance_after: { monthly: row.monthly_after, topup: row.topup_after },
  created_at: toTimestamp(row.created_at),
  request_id: row.request_id,
  reference: { kind: row.kind, id: row.reference_id },
  reason: row.reason
})

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

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const { cursorSecret } = yield* Secrets
  const decodeRows = Schema.decodeUnknownEffect(Schema.Array(HistoryRow))

  /**
   * One page of `accountId`'s history. `endpoint` names the route, so a cursor works only
   * where it was made and only with the filters that made it.
   */
  const list = (accountId: string, params: TransactionParams, endpoint: string) =>
    Effect.gen(function*() {
      const limit = params.limit ?? defaultPageSize
      const binding = [
        endpoint,
        accountId,
        params.type ?? "",
        params["created[gte]"]?.toISOString() ?? "",
        params["created[lte]"]?.toISOString() ?? ""
      ].join("|")
      const after = yield* readCursor(cursorSecret, binding, params.cursor, Position)

      const rows = yield* historyPage(sql, accountId, params, after, limit).pipe(Effect.flatMap(decodeRows))

      return keysetPage(
        rows,
        limit,
        toTransaction,
        (last) => signCursor(cursorSecret, binding, { seq: last.pos, ord: last.ord })
      ) satisfies CreditTransactionList
    }).pipe(orDieOnDb, traced("CreditHistory.list", { attributes: { accountId } }))

  return { list } as const
})

export class CreditHistory extends Context.Service<CreditHistory, Effect.Success<typeof make>>()("hookline/CreditHistory") {
  static readonly layer = Layer.effect(CreditHistory, make).pipe(Layer.provide(Secrets.layer))
}
