/** The hook catalog contract: categories, search, list and one hook. */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import { InsufficientCreditsWire, InvalidCursorWire, SearchTimedOutWire, SpendLimitReachedWire } from "../Errors.js"
import { hookPrice, pagePriceText } from "../Ledger/Prices.js"
import { Cursor, ListOf, strict, Timestamp } from "../Schemas.js"

export const HookId = Schema.String.annotate({ description: "`hook_` followed by 32 hexadecimal characters." }).check(
  Schema.isPattern(/^hook_[0-9a-f]{32}$/u, { expected: "`hook_` followed by 32 hexadecimal characters" })
)

const categorySlugRule =
  "must be a category slug: 1 to 64 lowercase letters and digits, in groups joined by single hyphens " +
  "(GET /v1/hooks/categories lists them)"

// Annotations go on the string, not after the checks: `.annotate` there would describe the last check only.
export const CategorySlug = Schema.String.annotate({
  description: "Lowercase letters and digits in groups joined by single hyphens, 1 to 64 characters."
}).check(
  Schema.isMinLength(1, { message: categorySlugRule }),
  Schema.isMaxLength(64, { message: categorySlugRule }),
  // The u flag lets the pattern into the JSON Schema (OpenAPI).
  Schema.isPattern(/^[a-z0-9]+(?:-[a-z0-9]+)*$/u, { message: categorySlugRule })
)

export const HookCategory = Schema.Struct({
  slug: Schema.String,
  name: Schema.String
}).annotate({ identifier: "HookCategory" })
export type HookCategory = typeof HookCategory.Type

export const HookCategoryList = ListOf(HookCategory, "HookCategoryList")

export const HookLean = Schema.Struct({
  id: Schema.String,
  text: Schema.String,
  platform: Schema.String,
  media_type: Schema.NullOr(Schema.String),
  thumbnail_url: Schema.NullOr(Schema.String),
  category: Schema.NullOr(Schema.String),
  hook_duration_sec: Schema.NullOr(Schema.Finite),
  published_at: Schema.NullOr(Timestamp)
}).annotate({ identifier: "HookLean" })
export type HookLean = typeof HookLean.Type

export const Emotions = Schema.Struct({
  inspiration: Schema.Finite,
  fear: Schema.Finite,
  curiosity: Schema.Finite,
  satisfaction: Schema.Finite,
  happiness: Schema.Finite,
  anger: Schema.Finite,
  surprise: Schema.Finite
}).annotate({ identifier: "Emotions", description: "Weights 0 to 100." })

export const CommentTheme = Schema.Struct({ word: Schema.String, count: Schema.Finite }).annotate({
  identifier: "CommentTheme"
})

const richFields = {
  source_url: Schema.NullOr(Schema.String),
  caption: Schema.NullOr(Schema.String),
  duration_sec: Schema.NullOr(Schema.Finite),
  summary: Schema.NullOr(Schema.String),
  emotions: Schema.NullOr(Emotions),
  comment_themes: Schema.NullOr(Schema.Array(CommentTheme)),
  // Free-form JSON (null included), passed through as imported.
  metrics: Schema.Unknown,
  creator: Schema.Unknown,
  audio: Schema.Unknown
}

export const HookRich = Schema.Struct({ ...HookLean.fields, ...richFields }).annotate({ identifier: "HookRich" })
export type HookRich = typeof HookRich.Type

export const HookList = ListOf(HookLean, "HookList")
export type HookList = typeof HookList.Type

/** The longest q, in characters (docs/behaviour.md, "Catalog search"). */
export const maxQueryCharacters = 200

/** The answer of an import (POST /admin/catalog/hooks): the Hooks room's, shown by the admin API. */
export const ImportResult = Schema.Struct({
  object: Schema.Literal("import_result"),
  inserted: Schema.Int,
  updated: Schema.Int,
  rejected_count: Schema.Int.annotate({ description: "Every record rejected." }),
  rejected: Schema.Array(Schema.Struct({ index: Schema.Int, message: Schema.String })).annotate({
    description: "The first 1,000 rejected records: index is the 1-based line number for NDJSON, the 0-based array position for a JSON array."
  })
}).annotate({ identifier: "ImportResult" })
export type ImportResult = typeof ImportResult.Type

export const SearchParams = Schema.Struct({
  q: Schema.String.annotate({ description: "Words matched against hook text, 1 to 200 characters." }).check(
    Schema.isMinLength(1, { message: "must be at least 1 character" }),
    // Characters are code points (an emoji is one), as JSON Schema's maxLength counts them.
    Schema.isMaxCodePoints(maxQueryCharacters, { message: `must be at most ${maxQueryCharacters} characters` }),
    // PostgreSQL text cannot hold U+0000: refuse it here, before the reserve.
    Schema.makeFilter((q: string) => !q.includes("\u0000"), { message: "must not contain the NUL character (U+0000)" })
  ).pipe(Schema.annotateKey({
    messageMissingKey: "is missing: q is the text to search for, 1 to 200 characters (e.g. ?q=morning+routine)"
  })),
  cursor: Schema.optional(Cursor)
})

export const ListParams = Schema.Struct({
  category: CategorySlug,
  cursor: Schema.optional(Cursor)
})

export class HooksApi extends HttpApiGroup.make("hooks")
  .add(
    HttpApiEndpoint.get("categories", "/hooks/categories", { success: HookCategoryList })
      .annotate(AccessRule, needs(null))
      .annotate(OpenApi.Summary, "List hook categories")
      .annotate(OpenApi.Description, "All categories, ordered by name, in one page. Costs 0.")
  )
  .add(
    HttpApiEndpoint.get("search", "/hooks/search", {
      query: SearchParams,
      success: HookList,
      error: [InvalidCursorWire, InsufficientCreditsWire, SpendLimitReachedWire, SearchTimedOutWire]
    })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(AccessRule, needs("hooks:read"))
      .annotate(OpenApi.Summary, "Search hooks")
      .annotate(
        OpenApi.Description,
        "Full-text search over hook text (English stemming; every word of q must appear), ranked by relevance " +
          "(PostgreSQL ts_rank), ties by newest published_at then id (descending). A q with no searchable word " +
          "(only stop words, punctuation or emoji) matches hooks whose text contains it, case-insensitively, newest first. " +
          `${pagePriceText} A search that runs too long is ` +
          "answered 503 and costs nothing. Needs hooks:read."
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/hooks/list", {
      query: ListParams,
      success: HookList,
      error: [InvalidCursorWire, InsufficientCreditsWire, SpendLimitReachedWire, SearchTimedOutWire]
    })
      .annotate(HttpApi.QueryParseOptions, strict)
      .annotate(AccessRule, needs("hooks:read"))
      .annotate(OpenApi.Summary, "List a category's hooks")
      .annotate(
        OpenApi.Description,
        `One category, newest first. ${pagePriceText} A list that ` +
          "runs too long is answered 503 and costs nothing. Needs hooks:read."
      )
  )
  .add(
    // The id is checked by the handler, so a malformed one is a 404 like an unknown one.
    HttpApiEndpoint.get("get", "/hooks/:id", {
      params: { id: Schema.String },
      success: HookRich,
      error: [InsufficientCreditsWire, SpendLimitReachedWire]
    })
      .annotate(AccessRule, needs("hooks:read"))
      .annotate(OpenApi.Summary, "Get a hook")
      .annotate(OpenApi.Description, `The full hook. Costs ${hookPrice} credit. A malformed or unknown id is 404. Needs hooks:read.`)
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Hooks")
{}
