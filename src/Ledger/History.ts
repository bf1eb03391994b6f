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
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Secrets } from "../Config.js"
import { keysetPage, readCursor, signCursor } from "../Cursor.js"
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

/** Where the previous page ended: the last row's journal seq and its bucket order. */
const Position = Schema.Struct({ seq: Schema.Int, ord: Schema.Int })

const HistoryRow = Schema.Struct({
  pos: Schema.Number,
  ord: Schema.Number,
  id: Schema.String,
  type: TransactionType,
  bucket: Bucket,
  amount: Schema.Number,
  monthly_after: Schema.Number,
  topup_after: Schema.Number,
  created_at: Schema.DateFromSelf,
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

export class CreditHistory extends Effect.Service<CreditHistory>()("hookline/CreditHistory", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { cursorSecret } = yield* Secrets

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

        const rows = yield* sql`
          SELECT j.seq AS pos, e.ord, e.id, e.type, e.bucket, e.amount, j.monthly_after, j.topup_after,
                 e.created_at, e.request_id, e.kind, e.reference_id, e.reason
            FROM credit_journal j
            LEFT JOIN holds h ON h.id = j.hold_id AND j.operation <> 'prediction'
            CROSS JOIN LATERAL (
              SELECT 0 AS ord, j.id,
                     CASE j.entry_type WHEN 'grant' THEN 'grant' WHEN 'expire' THEN 'expiry'
                                       WHEN 'reserve' THEN 'charge' ELSE 'refund' END AS type,
                     j.bucket, j.amount, j.created_at, j.request_id, j.operation AS kind, j.reference_id, j.reason
               WHERE h.id IS NULL
              UNION ALL
              SELECT b.ord, r.id, 'charge', b.bucket, -b.amount, h.resolved_at, h.request_id, h.operation, h.reference_id, NULL::text
                FROM (VALUES (1, 'monthly', h.settled_monthly), (2, 'topup', h.settled_topup)) AS b (ord, bucket, amount)
                JOIN credit_journal r ON r.hold_id = h.id AND r.entry_type = 'reserve' AND r.bucket = b.bucket
               WHERE h.status = 'settled' AND b.amount > 0
                 AND j.seq = (SELECT max(x.seq) FROM credit_journal x WHERE x.hold_id = h.id)
            ) e
           WHERE j.account_id = ${accountId}
             ${
          Option.match(after, {
            onNone: () => sql``,
            onSome: (position) =>
              sql`AND j.seq <= ${position.seq} AND (j.seq < ${position.seq} OR e.ord < ${position.ord})`
          })
        }
             ${params.type === undefined ? sql`` : sql`AND e.type = ${params.type}`}
             ${params["created[gte]"] === undefined ? sql`` : sql`AND e.created_at >= ${params["created[gte]"]}`}
             ${params["created[lte]"] === undefined ? sql`` : sql`AND e.created_at <= ${params["created[lte]"]}`}
           ORDER BY j.seq DESC, e.ord DESC
           LIMIT ${limit + 1}
        `.pipe(Effect.flatMap(Schema.decodeUnknown(Schema.Array(HistoryRow))))

        return keysetPage(
          rows,
          limit,
          toTransaction,
          (last) => signCursor(cursorSecret, binding, { seq: last.pos, ord: last.ord })
        ) satisfies CreditTransactionList
      }).pipe(orDieOnDb, Effect.withSpan("CreditHistory.list", { attributes: { accountId } }))

    return { list } as const
  }),
  dependencies: [Secrets.Live]
}) {}
