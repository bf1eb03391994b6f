/** The wallet contract (spec 2.2, 4.2) and the credit history. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import { InvalidCursorWire } from "../Errors.js"
import { Cursor, ListOf, strict, Timestamp } from "../Schemas.js"
import { Bucket } from "./Domain.js"

/**
 * The most credits one balance may hold: the largest integer every JSON client reads exactly
 * (2^53 - 1), well inside the database's bigint. A grant that would pass it is refused (422).
 */
export const maxBalance = Number.MAX_SAFE_INTEGER

export const Wallet = Schema.Struct({
  object: Schema.Literal("wallet"),
  monthly_balance: Schema.Int,
  monthly_period_end: Schema.NullOr(Timestamp),
  topup_balance: Schema.Int
}).annotations({ identifier: "Wallet" })
export type Wallet = typeof Wallet.Type

export const TransactionType = Schema.Literal("grant", "charge", "refund", "expiry")
export type TransactionType = typeof TransactionType.Type

export const TransactionReferenceKind = Schema.Literal("search", "list", "hook", "prediction", "admin", "rollover")
export type TransactionReferenceKind = typeof TransactionReferenceKind.Type

export const CreditTransaction = Schema.Struct({
  object: Schema.Literal("credit_transaction"),
  id: Schema.String,
  type: TransactionType,
  bucket: Bucket,
  amount: Schema.Int.annotations({ description: "Signed: credits added (grant, refund) or taken (charge, expiry)." }),
  balance_after: Schema.Struct({ monthly: Schema.Int, topup: Schema.Int }).annotations({
    description: "Both balances right after this change, as the caller saw them (credits held by requests still running are out)."
  }),
  created_at: Timestamp,
  request_id: Schema.NullOr(Schema.String).annotations({
    description: "The X-Request-Id of the request that made the change; null for rollovers and opening balances."
  }),
  reference: Schema.Struct({
    kind: TransactionReferenceKind,
    id: Schema.NullOr(Schema.String).annotations({
      description: "The hook or prediction id of a charge, or the billing system's reference of a grant."
    })
  }),
  reason: Schema.NullOr(Schema.String).annotations({
    description: "Why a grant or expiry happened: the `reason` given with an admin grant, or `monthly grant`, " +
      "`monthly period ended`, `plan changed`, `opening balance`; null for charges, refunds and grants given without one."
  })
}).annotations({
  identifier: "CreditTransaction",
  description: "One change of a balance. A request's charge is one row per bucket it took from (normally one), " +
    "listed once its hold settles; a prediction's 20 credits are a charge when reserved and a refund if it fails."
})
export type CreditTransaction = typeof CreditTransaction.Type

export const CreditTransactionList = ListOf(CreditTransaction, "CreditTransactionList")
export type CreditTransactionList = typeof CreditTransactionList.Type

/** A date (`2026-11-22`, midnight UTC) or a date-time with Z or an offset. */
const TimestampInput = Schema.compose(
  Schema.String.pipe(
    Schema.pattern(/^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2}))?$/, {
      message: () => "must be an ISO 8601 date or date-time with Z or an offset, e.g. 2026-11-22T14:28:55.123Z"
    })
  ),
  Schema.Date
)

export const TransactionParams = Schema.Struct({
  limit: Schema.optional(
    Schema.NumberFromString.pipe(
      Schema.int(),
      Schema.between(1, 100, { message: () => "must be an integer from 1 to 100" })
    ).annotations({ description: "Page size, 1 to 100; 50 when absent." })
  ),
  cursor: Schema.optional(Cursor),
  type: Schema.optional(TransactionType.annotations({ description: "Only transactions of this type." })),
  "created[gte]": Schema.optional(
    TimestampInput.annotations({ description: "Only transactions created at or after this time (ISO 8601)." })
  ),
  "created[lte]": Schema.optional(
    TimestampInput.annotations({ description: "Only transactions created at or before this time (ISO 8601)." })
  )
}).annotations(strict)
export type TransactionParams = typeof TransactionParams.Type

export const transactionsDescription =
  "The account's credit history, newest first: grants, charges (one per request, the amount it settled for), " +
  "refunds (a failed prediction's credits back) and expiries (unused monthly credits at a rollover). " +
  "Summing `amount` over a range reproduces the balance change; each charge carries the request_id the " +
  "caller saw as X-Request-Id, so its amounts add up to that request's X-Credits-Charged. " +
  "Keyset pages: `limit` 1 to 100 (default 50), `cursor` from next_cursor with the same filters; new transactions " +
  "never shift a page. Filters: `type`, `created[gte]`, `created[lte]`."

export class WalletApi extends HttpApiGroup.make("wallet")
  .add(
    HttpApiEndpoint.get("get", "/wallet")
      .addSuccess(Wallet)
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "Get the wallet")
      .annotate(OpenApi.Description, "The monthly and top-up balances. Costs 0. Stays available after plan loss.")
  )
  .add(
    HttpApiEndpoint.get("transactions", "/wallet/transactions")
      .setUrlParams(TransactionParams)
      .addSuccess(CreditTransactionList)
      .addError(InvalidCursorWire)
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "List credit transactions")
      .annotate(OpenApi.Description, `${transactionsDescription} Costs 0. Any valid key. Stays available after plan loss.`)
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Wallet")
{}
