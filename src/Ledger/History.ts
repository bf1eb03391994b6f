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
 * land before its first page and never shift the pages after it. The statements are HistoryRepo's.
 */
import { Context, Effect, Layer } from "effect"
import { Secrets } from "../Config.js"
import type { InvalidCursor } from "../Errors.js"
import { keysetPage, readCursor, signCursor } from "../Cursor.js"
import { traced } from "../Observability/Tracing.js"
import { toTimestamp } from "../Schemas.js"
import type { CreditTransaction, CreditTransactionList, TransactionParams } from "./Api.js"
import { type HistoryRow, HistoryRepo, Position } from "./HistoryRepo.js"
import { Ledger } from "./Ledger.js"

export const defaultPageSize = 50

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

/** An account's credit history, a page at a time. */
export interface CreditHistoryService {
  /**
   * One page of `accountId`'s history. `endpoint` names the route, so a cursor works only
   * where it was made and only with the filters that made it. A monthly rollover that is due
   * is applied first, so its expiry and grant are listed. InvalidCursor when the cursor is
   * malformed, altered, or from another route or filters.
   */
  readonly list: (accountId: string, params: TransactionParams, endpoint: string) => Effect.Effect<CreditTransactionList, InvalidCursor>
}

const make = Effect.gen(function*() {
  const repo = yield* HistoryRepo
  const ledger = yield* Ledger
  const { cursorSecret } = yield* Secrets

  const list = (accountId: string, params: TransactionParams, endpoint: string) =>
    Effect.gen(function*() {
      yield* ledger.wallet(accountId)
      const limit = params.limit ?? defaultPageSize
      const binding = [
        endpoint,
        accountId,
        params.type ?? "",
        params["created[gte]"]?.toISOString() ?? "",
        params["created[lte]"]?.toISOString() ?? ""
      ].join("|")
      const after = yield* readCursor(cursorSecret, binding, params.cursor, Position)

      const rows = yield* repo.historyPage(accountId, params, after, limit)

      return keysetPage(
        rows,
        limit,
        toTransaction,
        (last) => signCursor(cursorSecret, binding, { seq: last.pos, ord: last.ord })
      ) satisfies CreditTransactionList
    }).pipe(traced("CreditHistory.list", { attributes: { accountId } }))

  return CreditHistory.of({ list })
})

export class CreditHistory extends Context.Service<CreditHistory, CreditHistoryService>()("hookline/CreditHistory") {
  /** Takes its HistoryRepo and Ledger from the caller (in-memory ones in a test). */
  static readonly layerWithoutDependencies = Layer.effect(CreditHistory, make).pipe(Layer.provide(Secrets.layer))
  static readonly layer = CreditHistory.layerWithoutDependencies.pipe(Layer.provide([HistoryRepo.layer, Ledger.layer]))
}
