/** The operators' contract: accounts, keys, credits and the catalog, under /admin. */
import { Schema } from "effect"
import {
  HttpApi,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSecurity,
  OpenApi
} from "effect/http-api"
import { Plan, Scope } from "../Auth/Api.js"
import { InvalidApiKeyWire, InvalidCursorWire, NotFoundWire, RateLimitExceededWire } from "../Errors.js"
import { HookCategoryList, ImportResult } from "../Hooks/Api.js"
import { acceptsIdempotencyKey, IdempotencyKeys } from "../Idempotency/Api.js"
import { StreamedBody } from "../RouteTraits.js"
import {
  CreditTransactionList,
  KeySpend,
  maxBalance,
  TransactionParams,
  transactionsDescription,
  usageDescription,
  UsageParams,
  UsageSummary,
  Wallet
} from "../Ledger/Api.js"
import { Bucket } from "../Ledger/Domain.js"
import { strict, Timestamp, timestampInput } from "../Schemas.js"
import { RecoverDeliveries, recoverDescription, WebhookRecovery } from "../Webhooks/Api.js"

/** A whole number of credits in [min, max], with one plain message for any other number. */
const wholeCredits = (min: number, max: number) =>
  Schema.Finite.check(Schema.makeFilter((n: number) => Number.isSafeInteger(n) && n >= min && n <= max, {
    message: `must be a whole number from ${min} to ${max}`,
    toJsonSchema: () => ({ type: "integer", minimum: min, maximum: max })
  }))

const Credits = wholeCredits(0, maxBalance)
/** The monthly grant is a PostgreSQL integer. */
const MonthlyGrant = wholeCredits(0, 2_147_483_647)

/*
 * Optional request fields are `optionalKey`: JSON leaves them out (null is refused), and a
 * caller building a payload leaves the key out rather than setting it to undefined.
 * Requests reject properties their schema does not name: each endpoint's payload is parsed
 * with `strict` (HttpApi.PayloadParseOptions), its query likewise.
 */

export const Account = Schema.Struct({
  object: Schema.Literal("account"),
  id: Schema.String,
  name: Schema.NullOr(Schema.String),
  plan: Plan,
  api_access: Schema.Boolean,
  suspended: Schema.Boolean,
  monthly_grant: Schema.Int,
  wallet: Wallet
}).annotate({ identifier: "Account" })
export type Account = typeof Account.Type

export const CreateAccount = Schema.Struct({
  name: Schema.optionalKey(Schema.String.check(Schema.isMaxLength(200))),
  plan: Plan,
  monthly_grant: Schema.optionalKey(MonthlyGrant),
  monthly_balance: Schema.optionalKey(Credits),
  topup_balance: Schema.optionalKey(Credits)
}).annotate({ identifier: "CreateAccount" })
export type CreateAccount = typeof CreateAccount.Type

export const UpdateAccount = Schema.Struct({
  plan: Schema.optionalKey(Plan),
  suspended: Schema.optionalKey(Schema.Boolean)
}).annotate({ identifier: "UpdateAccount" })
export type UpdateAccount = typeof UpdateAccount.Type

const SpendLimit = Credits.annotate({
  description: "Credits the key may take per period of its account (its monthly period; the calendar month, UTC, without " +
    "a monthly grant). A request that would pass it is 402 spend_limit_reached."
})

export const CreateKey = Schema.Struct({
  scopes: Schema.optionalKey(Schema.Array(Scope)),
  spend_limit: Schema.optionalKey(SpendLimit)
}).annotate({ identifier: "CreateKey" })

export const UpdateKey = Schema.Struct({
  spend_limit: Schema.NullOr(SpendLimit).annotate({ description: "The new limit; null removes it. What the key spent in the period stays counted." })
}).annotate({ identifier: "UpdateKey" })

export const ApiKeyCreated = Schema.Struct({
  object: Schema.Literal("api_key"),
  id: Schema.String,
  api_key: Schema.String,
  scopes: Schema.Array(Scope),
  spend_limit: Schema.NullOr(Schema.Int),
  created_at: Timestamp
}).annotate({ identifier: "ApiKeyCreated" })
export type ApiKeyCreated = typeof ApiKeyCreated.Type

export const ApiKeyRevoked = Schema.Struct({
  object: Schema.Literal("api_key"),
  id: Schema.String,
  revoked: Schema.Literal(true)
}).annotate({ identifier: "ApiKeyRevoked" })

export const GrantCredits = Schema.Struct({
  bucket: Bucket,
  amount: wholeCredits(1, maxBalance),
  reason: Schema.optionalKey(Schema.String.check(Schema.isMaxLength(500))),
  expires_at: Schema.optionalKey(timestampInput(
    "Top-up only: when what is left of this grant expires (in the future; absent: never). Spending takes top-up grants " +
      "soonest-expiring first; at expires_at the rest leaves the top-up balance as an expiry in the credit history."
  )),
  reference: Schema.optionalKey(
    Schema.String.check(
      Schema.isPattern(/^[\x20-\x7E]{1,255}$/u, { message: "must be 1 to 255 printable ASCII characters" })
    ).annotate({
      description: "The billing system's own id for this grant (an invoice or payment id), unique per account: " +
        "a second grant with the same reference, bucket, amount and expires_at credits nothing and answers the wallet; " +
        "with another it is 422. Shown as reference.id in the credit history."
    })
  )
}).annotate({ identifier: "GrantCredits" })
export type GrantCredits = typeof GrantCredits.Type

export const CategoryInput = Schema.Struct({
  slug: Schema.String.check(
    Schema.isMinLength(1),
    Schema.isMaxLength(64),
    Schema.isPattern(/^[a-z0-9]+(?:-[a-z0-9]+)*$/u)
  ),
  name: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))
})
export const PutCategories = Schema.Array(CategoryInput).annotate({ identifier: "PutCategories" })

// The import's answer is the Hooks room's; the admin contract shows it.
export { ImportResult } from "../Hooks/Api.js"

/**
 * The admin token check (Http.ts). It provides nothing: a request either carries the token or
 * is refused, counted against its client address's failed-authentication limit.
 */
export class AdminAuthentication extends HttpApiMiddleware.Service<AdminAuthentication>()("hookline/AdminAuthentication", {
  error: [InvalidApiKeyWire, NotFoundWire, RateLimitExceededWire],
  security: { adminToken: HttpApiSecurity.bearer }
}) {}

const accountId = { id: Schema.String }
const keyId = { id: Schema.String }

export class AdminApi extends HttpApiGroup.make("admin")
  .add(
    HttpApiEndpoint.post("createAccount", "/accounts", { payload: CreateAccount, success: Account })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Create an account")
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.get("getAccount", "/accounts/:id", { params: accountId, success: Account })
      .annotate(OpenApi.Summary, "Get an account")
  )
  .add(
    HttpApiEndpoint.patch("updateAccount", "/accounts/:id", { params: accountId, payload: UpdateAccount, success: Account })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Change an account's plan or suspension")
  )
  .add(
    HttpApiEndpoint.post("createKey", "/accounts/:id/keys", { params: accountId, payload: CreateKey, success: ApiKeyCreated })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Create an API key")
      .annotate(
        OpenApi.Description,
        "The plain key is in this answer only (and in its replay to the same Idempotency-Key). Scopes default to all three."
      )
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.patch("updateKey", "/keys/:id", { params: keyId, payload: UpdateKey, success: KeySpend })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Set or remove an API key's spend limit")
      .annotate(OpenApi.Description, "Answers the key's limit and what it spent in the current period. 404 for an unknown key.")
  )
  .add(
    HttpApiEndpoint.delete("revokeKey", "/keys/:id", { params: keyId, success: ApiKeyRevoked })
      .annotate(OpenApi.Summary, "Revoke an API key")
  )
  .add(
    HttpApiEndpoint.post("grantCredits", "/accounts/:id/credits", { params: accountId, payload: GrantCredits, success: Wallet })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Grant credits")
      .annotate(
        OpenApi.Description,
        "Adds credits to one bucket and answers the wallet. A billing system makes a retry safe with an " +
          "Idempotency-Key header, or with `reference` (checked by the ledger itself, forever rather than 24 hours)."
      )
      .middleware(IdempotencyKeys)
      .annotate(OpenApi.Transform, acceptsIdempotencyKey)
  )
  .add(
    HttpApiEndpoint.get("listTransactions", "/accounts/:id/transactions", {
      params: accountId,
      query: TransactionParams,
      success: CreditTransactionList,
      error: InvalidCursorWire
    })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(OpenApi.Summary, "List an account's credit transactions")
      .annotate(OpenApi.Description, transactionsDescription)
  )
  .add(
    HttpApiEndpoint.get("accountUsage", "/accounts/:id/usage", { params: accountId, query: UsageParams, success: UsageSummary })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(OpenApi.Summary, "Summarise an account's credit usage")
      .annotate(OpenApi.Description, usageDescription)
  )
  .add(
    HttpApiEndpoint.post("recoverDeliveries", "/accounts/:id/webhooks/deliveries/recover", {
      params: accountId,
      payload: RecoverDeliveries,
      success: WebhookRecovery
    })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Re-send an account's failed webhook deliveries since a time")
      .annotate(OpenApi.Description, `${recoverDescription} 404 for an unknown account.`)
  )
  .add(
    HttpApiEndpoint.put("putCategories", "/catalog/categories", { payload: PutCategories, success: HookCategoryList })
      .annotate(HttpApi.PayloadParseOptions, strict)
      .annotate(OpenApi.Summary, "Replace the category list")
  )
  .add(
    // No payload schema: the handler streams the body itself (Hooks/Import.ts).
    HttpApiEndpoint.post("importHooks", "/catalog/hooks", { success: ImportResult })
      .annotate(OpenApi.Summary, "Import hooks")
      .annotate(StreamedBody, true)
      .annotate(
        OpenApi.Description,
        "A JSON array (Content-Type application/json), or NDJSON (application/x-ndjson, one hook per line; blank lines " +
          "are skipped), of hooks in the HookRich shape. `id` is optional: when absent it is derived from platform + " +
          "source_url (hook_ + the first 32 hex of their SHA-256), so importing the same source again updates the hook " +
          "instead of duplicating it. Nullable fields may be left out (null); unknown fields are rejected; text is 1 to 500 " +
          "characters. The body is streamed and staged as it arrives, then written in one transaction once it is complete: a " +
          "rejected record never stops the others, while a body that breaks off, or grows past IMPORT_MAX_BODY_BYTES (413, also " +
          "refused up front when Content-Length declares more), writes nothing. " +
          "Rejected records are reported with their index: the 1-based line number for NDJSON, the 0-based array position " +
          "for a JSON array. Unlike the other admin POSTs it takes no Idempotency-Key (the body is streamed, not kept): " +
          "a retried import upserts the same hooks again, so it is safe to repeat."
      )
  )
  .middleware(AdminAuthentication)
  .prefix("/admin")
  .annotate(OpenApi.Title, "Admin")
{}
