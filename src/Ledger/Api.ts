/** The wallet contract and the credit history. */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import { InvalidCursorWire } from "../Errors.js"
import { Cursor, ListOf, PageLimit, strict, Timestamp, timestampInput } from "../Schemas.js"
import { toNullableTimestamp, toTimestamp } from "../Schemas.js"
import { Bucket, type TopupGrant as TopupGrantState, type WalletState } from "./Domain.js"
import { predictionPrice } from "./Prices.js"

export { maxBalance } from "./Domain.js"

export const Wallet = Schema.Struct({
  object: Schema.Literal("wallet"),
  monthly_balance: Schema.Int,
  monthly_period_end: Schema.NullOr(Timestamp),
  topup_balance: Schema.Int
}).annotate({ identifier: "Wallet" })
export type Wallet = typeof Wallet.Type

/** The wallet as the contract shows it. */
export const walletOf = (state: WalletState): Wallet => ({
  object: "wallet",
  monthly_balance: state.monthly,
  monthly_period_end: toNullableTimestamp(state.periodEnd),
  topup_balance: state.topup
})

export const TopupGrant = Schema.Struct({
  object: Schema.Literal("topup_grant"),
  id: Schema.String.annotate({ description: "The grant's id; its expiry in the credit history carries it as reference.id." }),
  amount: Schema.Int.annotate({ description: "Credits granted." }),
  remaining: Schema.Int.annotate({ description: "Credits left of it: part of topup_balance until spent or expired." }),
  expires_at: Schema.NullOr(Timestamp).annotate({ description: "When what is left expires; null: never." }),
  created_at: Timestamp
}).annotate({ identifier: "TopupGrant" })

export const TopupGrantList = ListOf(TopupGrant, "TopupGrantList")
export type TopupGrantList = typeof TopupGrantList.Type

/** The most live grants one answer lists: the first to be spent; `has_more` says there are others. */
export const grantsListed = 100

/** The live top-up grants as the contract lists them. */
export const topupGrantListOf = (listed: { readonly grants: ReadonlyArray<TopupGrantState>; readonly more: boolean }): TopupGrantList => ({
  object: "list",
  data: listed.grants.map((grant) => ({
    object: "topup_grant",
    id: grant.id,
    amount: grant.amount,
    remaining: grant.remaining,
    expires_at: toNullableTimestamp(grant.expiresAt),
    created_at: toTimestamp(grant.createdAt)
  })),
  has_more: listed.more,
  next_cursor: null
})

export const KeySpend = Schema.Struct({
  object: Schema.Literal("key_spend"),
  key_id: Schema.String,
  spend_limit: Schema.NullOr(Schema.Int).annotate({
    description: "Credits the key may take per period; null: no limit. A request that would pass it is 402 spend_limit_reached."
  }),
  period_spent: Schema.Int.annotate({
    description: "Credits the key's requests took in the current period: reserves, less what their holds gave back."
  }),
  period_end: Timestamp.annotate({
    description: "When the period ends and the count starts again: the account's monthly period, or the calendar month " +
      "(UTC) for an account without a monthly grant."
  })
}).annotate({ identifier: "KeySpend" })
export type KeySpend = typeof KeySpend.Type

export const TransactionType = Schema.Literals(["grant", "charge", "refund", "expiry"])
export type TransactionType = typeof TransactionType.Type

export const TransactionReferenceKind = Schema.Literals(["search", "list", "hook", "prediction", "admin", "rollover"])
export type TransactionReferenceKind = typeof TransactionReferenceKind.Type

export const CreditTransaction = Schema.Struct({
  object: Schema.Literal("credit_transaction"),
  id: Schema.String,
  type: TransactionType,
  bucket: Bucket,
  amount: Schema.Int.annotate({ description: "Signed: credits added (grant, refund) or taken (charge, expiry)." }),
  balance_after: Schema.Struct({ monthly: Schema.Int, topup: Schema.Int }).annotate({
    description: "Both balances right after this change, as the caller saw them (credits held by requests still running are out)."
  }),
  created_at: Timestamp,
  request_id: Schema.NullOr(Schema.String).annotate({
    description: "The X-Request-Id of the request that made the change; null for rollovers and opening balances."
  }),
  reference: Schema.Struct({
    kind: TransactionReferenceKind,
    id: Schema.NullOr(Schema.String).annotate({
      description: "The hook or prediction id of a charge, the billing system's reference of a grant, or the top-up grant's id of its expiry."
    })
  }),
  reason: Schema.NullOr(Schema.String).annotate({
    description: "Why a grant or expiry happened: the `reason` given with an admin grant, or `monthly grant`, " +
      "`monthly period ended`, `plan changed`, `opening balance`, `top-up grant expired`; null for charges, refunds and grants given without one."
  })
}).annotate({
  identifier: "CreditTransaction",
  description: "One change of a balance. A request's charge is one row per bucket it took from (normally one), " +
    `listed once its hold settles; a prediction's ${predictionPrice} credits are a charge when reserved and a refund if it fails.`
})
export type CreditTransaction = typeof CreditTransaction.Type

export const CreditTransactionList = ListOf(CreditTransaction, "CreditTransactionList")
export type CreditTransactionList = typeof CreditTransactionList.Type

export const TransactionParams = Schema.Struct({
  limit: Schema.optional(PageLimit),
  cursor: Schema.optional(Cursor),
  type: Schema.optional(TransactionType.annotate({ description: "Only transactions of this type." })),
  "created[gte]": Schema.optional(timestampInput("Only transactions created at or after this time (ISO 8601).")),
  "created[lte]": Schema.optional(timestampInput("Only transactions created at or before this time (ISO 8601)."))
})
export type TransactionParams = typeof TransactionParams.Type

export const transactionsDescription =
  "The account's credit history, newest first: grants, charges (one per request, the amount it settled for), " +
  "refunds (a failed prediction's credits back) and expiries (unused monthly credits at a rollover, what was left of " +
  "a top-up grant at its expires_at, reference.id the grant's id). " +
  "Summing `amount` over a range reproduces the balance change; each charge carries the request_id the " +
  "caller saw as X-Request-Id, so its amounts add up to that request's X-Credits-Charged. " +
  "Keyset pages: `limit` 1 to 100 (default 50), `cursor` from next_cursor with the same filters; new transactions " +
  "never shift a page. Filters: `type`, `created[gte]`, `created[lte]`."

export const UsageGroupBy = Schema.Literals(["day", "operation", "key"])
export type UsageGroupBy = typeof UsageGroupBy.Type

export const UsageParams = Schema.Struct({
  from: Schema.optional(timestampInput("Start of the range (inclusive); 30 days before `to` when absent.")),
  to: Schema.optional(timestampInput("End of the range (exclusive); now when absent.")),
  group_by: Schema.optional(UsageGroupBy.annotate({
    description: "`day` (UTC, the default), `operation`, or `key` (the API key id; `none` for grants and expiries, which no key made)."
  }))
})
export type UsageParams = typeof UsageParams.Type

const usageAmounts = {
  spent: Schema.Int.annotate({ description: "Credits requests took, net of a hold's unused credits given back." }),
  refunded: Schema.Int.annotate({ description: "Credits given back for failed predictions." }),
  granted: Schema.Int.annotate({ description: "Credits added: billing and admin grants, monthly grants." }),
  expired: Schema.Int.annotate({ description: "Unused monthly credits lost at a new period, and top-up grants' credits at their expiry." }),
  net: Schema.Int.annotate({ description: "The balance change: granted - spent + refunded - expired (the journal's sum)." })
}

export const UsageRow = Schema.Struct({
  key: Schema.String.annotate({
    description: "The UTC day (`2026-11-22`) or the operation: search, list, get, predict, admin (grants), rollover (new periods)."
  }),
  ...usageAmounts
}).annotate({ identifier: "UsageRow" })
export type UsageRow = typeof UsageRow.Type

export const UsageSummary = Schema.Struct({
  object: Schema.Literal("usage_summary"),
  from: Timestamp,
  to: Timestamp,
  group_by: UsageGroupBy,
  data: Schema.Array(UsageRow).annotate({ description: "Groups with any change, in key order; days without one are left out." }),
  totals: Schema.Struct(usageAmounts)
}).annotate({ identifier: "UsageSummary" })
export type UsageSummary = typeof UsageSummary.Type

export const usageDescription =
  "Credits spent, refunded, granted and expired over a range (at most USAGE_MAX_RANGE_DAYS, 93 days), per UTC day, " +
  "per operation or per API key, computed from the credit journal: `totals.net` is the balance change over the range. A request's " +
  "charge counts when reserved and its unused credits when given back. Bad or reversed dates, or a longer range, are 422."

export const WalletAlert = Schema.Struct({
  object: Schema.Literal("wallet_alert"),
  threshold: Schema.NullOr(Schema.Int).annotate({ description: "Credits (monthly + top-up); null: no alert." }),
  armed: Schema.Boolean.annotate({
    description: "True when the next crossing below the threshold sends wallet.low_balance; a crossing disarms it, a grant " +
      "or a new period that brings the balance back to the threshold re-arms it."
  })
}).annotate({ identifier: "WalletAlert" })
export type WalletAlert = typeof WalletAlert.Type

export const SetWalletAlert = Schema.Struct({
  threshold: Schema.Int.check(
    Schema.isBetween({ minimum: 1, maximum: 1_000_000_000 }, { message: "must be an integer from 1 to 1,000,000,000" })
  )
}).annotate({ identifier: "SetWalletAlert" })

export class WalletApi extends HttpApiGroup.make("wallet")
  .add(
    HttpApiEndpoint.get("get", "/wallet", { success: Wallet })
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "Get the wallet")
      .annotate(OpenApi.Description, "The monthly and top-up balances. Costs 0. Stays available after plan loss.")
  )
  .add(
    HttpApiEndpoint.get("grants", "/wallet/grants", { success: TopupGrantList })
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "List live top-up grants")
      .annotate(
        OpenApi.Description,
        "The top-up grants with credits left, in the order spending takes them: soonest expires_at first, never-expiring " +
          `last, then oldest. topup_balance is the sum of their remaining credits. At most ${grantsListed} (the first to be ` +
          "spent); has_more is true when there are more, and next_cursor is always null. Costs 0. Any valid key. " +
          "Stays available after plan loss."
      )
  )
  .add(
    HttpApiEndpoint.get("transactions", "/wallet/transactions", {
      query: TransactionParams,
      success: CreditTransactionList,
      error: InvalidCursorWire
    })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "List credit transactions")
      .annotate(OpenApi.Description, `${transactionsDescription} Costs 0. Any valid key. Stays available after plan loss.`)
  )
  .add(
    HttpApiEndpoint.get("usage", "/wallet/usage", { query: UsageParams, success: UsageSummary })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "Summarise credit usage")
      .annotate(OpenApi.Description, `${usageDescription} Costs 0. Any valid key. Stays available after plan loss.`)
  )
  .add(
    HttpApiEndpoint.get("currentKey", "/keys/current", { success: KeySpend })
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "Get the calling key's spend limit and spend")
      .annotate(
        OpenApi.Description,
        "The calling key's spend limit and what it spent in the current period. Costs 0. Any valid key. Stays available after plan loss."
      )
  )
  .add(
    HttpApiEndpoint.get("alert", "/wallet/alert", { success: WalletAlert })
      .annotate(AccessRule, needs(null, true))
      .annotate(OpenApi.Summary, "Get the low-balance alert")
      .annotate(OpenApi.Description, "Costs 0. Any valid key. Stays available after plan loss.")
  )
  .add(
    HttpApiEndpoint.put("setAlert", "/wallet/alert", { payload: SetWalletAlert, success: WalletAlert })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(AccessRule, needs(null))
      .annotate(OpenApi.Summary, "Set the low-balance alert")
      .annotate(
        OpenApi.Description,
        "When the total balance (monthly + top-up) goes below `threshold`, the webhook receives one signed " +
          "wallet.low_balance event, written in the same transaction as the debit that crossed it. Armed at once when the " +
          "balance is at or above the threshold. Costs 0. Any valid key."
      )
  )
  .add(
    HttpApiEndpoint.delete("clearAlert", "/wallet/alert", { success: WalletAlert })
      .annotate(AccessRule, needs(null))
      .annotate(OpenApi.Summary, "Remove the low-balance alert")
      .annotate(OpenApi.Description, "Costs 0. Any valid key. wallet.depleted events are not affected.")
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Wallet")
{}
