/** The hook catalog contract (spec 2.3–2.6, 4.3–4.6). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AccessRule, Authentication, needs } from "../Auth/Api.js"
import { InsufficientCreditsWire, InvalidCursorWire, SearchTimedOutWire } from "../Errors.js"
import { Cursor, ListOf, strict, Timestamp } from "../Schemas.js"

export const HookId = Schema.String.pipe(Schema.pattern(/^hook_[0-9a-f]{32}$/)).annotations({
  description: "`hook_` followed by 32 hexadecimal characters."
})

const categorySlugRule =
  "must be a category slug: 1 to 64 lowercase letters and digits, in groups joined by single hyphens " +
  "(GET /v1/hooks/categories lists them)"

export const CategorySlug = Schema.String.pipe(
  Schema.minLength(1, { message: () => categorySlugRule }),
  Schema.maxLength(64, { message: () => categorySlugRule }),
  Schema.pattern(/^[a-z0-9]+(?:-[a-z0-9]+)*$/, { message: () => categorySlugRule })
).annotations({ description: "Lowercase letters and digits in groups joined by single hyphens, 1 to 64 characters." })

export const HookCategory = Schema.Struct({
  slug: Schema.String,
  name: Schema.String
}).annotations({ identifier: "HookCategory" })
export type HookCategory = typeof HookCategory.Type

export const HookCategoryList = ListOf(HookCategory, "HookCategoryList")

export const HookLean = Schema.Struct({
  id: Schema.String,
  text: Schema.String,
  platform: Schema.String,
  media_type: Schema.NullOr(Schema.String),
  thumbnail_url: Schema.NullOr(Schema.String),
  category: Schema.NullOr(Schema.String),
  hook_duration_sec: Schema.NullOr(Schema.Number),
  published_at: Schema.NullOr(Timestamp)
}).annotations({ identifier: "HookLean" })
export type HookLean = typeof HookLean.Type

export const Emotions = Schema.Struct({
  inspiration: Schema.Number,
  fear: Schema.Number,
  curiosity: Schema.Number,
  satisfaction: Schema.Number,
  happiness: Schema.Number,
  anger: Schema.Number,
  surprise: Schema.Number
}).annotations({ identifier: "Emotions", description: "Weights 0 to 100." })

export const CommentTheme = Schema.Struct({ word: Schema.String, count: Schema.Number }).annotations({
  identifier: "CommentTheme"
})

const richFields = {
  source_url: Schema.NullOr(Schema.String),
  caption: Schema.NullOr(Schema.String),
  duration_sec: Schema.NullOr(Schema.Number),
  summary: Schema.NullOr(Schema.String),
  emotions: Schema.NullOr(Emotions),
  comment_themes: Schema.NullOr(Schema.Array(CommentTheme)),
  metrics: Schema.NullOr(Schema.Unknown),
  creator: Schema.NullOr(Schema.Unknown),
  audio: Schema.NullOr(Schema.Unknown)
}

export const HookRich = Schema.Struct({ ...HookLean.fields, ...richFields }).annotations({ identifier: "HookRich" })
export type HookRich = typeof HookRich.Type

export const HookList = ListOf(HookLean, "HookList")
export type HookList = typeof HookList.Type

/** The longest q (spec 8.2), in characters. */
export const maxQueryCharacters = 200

export const SearchParams = Schema.Struct({
  q: Schema.propertySignature(Schema.String.pipe(
    Schema.minLength(1),
    // Characters are code points (an emoji is one), as JSON Schema's maxLength counts them.
    Schema.filter((q) => [...q].length <= maxQueryCharacters, {
      message: () => `must be at most ${maxQueryCharacters} characters`,
      jsonSchema: { maxLength: maxQueryCharacters }
    }),
    // PostgreSQL text cannot hold U+0000: refuse it here, before the reserve.
    Schema.filter((q) => !q.includes("\u0000"), { message: () => "must not contain the NUL character (U+0000)" })
  ).annotations({
    description: "Words matched against hook text, 1 to 200 characters."
  })).annotations({
    missingMessage: () => "is missing: q is the text to search for, 1 to 200 characters (e.g. ?q=morning+routine)"
  }),
  cursor: Schema.optional(Cursor)
}).annotations(strict)

export const ListParams = Schema.Struct({
  category: CategorySlug,
  cursor: Schema.optional(Cursor)
}).annotations(strict)

const hookIdParam = HttpApiSchema.param("id", Schema.String)

export class HooksApi extends HttpApiGroup.make("hooks")
  .add(
    HttpApiEndpoint.get("categories", "/hooks/categories")
      .addSuccess(HookCategoryList)
      .annotate(AccessRule, needs(null))
      .annotate(OpenApi.Summary, "List hook categories")
      .annotate(OpenApi.Description, "All categories, ordered by name, in one page. Costs 0.")
  )
  .add(
    HttpApiEndpoint.get("search", "/hooks/search")
      .setUrlParams(SearchParams)
      .addSuccess(HookList)
      .addError(InvalidCursorWire)
      .addError(InsufficientCreditsWire)
      .addError(SearchTimedOutWire)
      .annotate(AccessRule, needs("hooks:read"))
      .annotate(OpenApi.Summary, "Search hooks")
      .annotate(
        OpenApi.Description,
        "Full-text search over hook text (English stemming; every word of q must appear), ranked by relevance " +
          "(PostgreSQL ts_rank), ties by newest published_at then id (descending). A q with no searchable word " +
          "(only stop words, punctuation or emoji) matches hooks whose text contains it, case-insensitively, newest first. " +
          "Reserves 2 credits and settles ceil(rows / 25); an empty page costs 0. A search that runs too long is " +
          "answered 503 and costs nothing. Needs hooks:read."
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/hooks/list")
      .setUrlParams(ListParams)
      .addSuccess(HookList)
      .addError(InvalidCursorWire)
      .addError(InsufficientCreditsWire)
      .addError(SearchTimedOutWire)
      .annotate(AccessRule, needs("hooks:read"))
      .annotate(OpenApi.Summary, "List a category's hooks")
      .annotate(
        OpenApi.Description,
        "One category, newest first. Reserves 2 credits and settles ceil(rows / 25); an empty page costs 0. A list that " +
          "runs too long is answered 503 and costs nothing. Needs hooks:read."
      )
  )
  .add(
    HttpApiEndpoint.get("get")`/hooks/${hookIdParam}`
      .addSuccess(HookRich)
      .addError(InsufficientCreditsWire)
      .annotate(AccessRule, needs("hooks:read"))
      .annotate(OpenApi.Summary, "Get a hook")
      .annotate(OpenApi.Description, "The full hook. Costs 1 credit. A malformed or unknown id is 404. Needs hooks:read.")
  )
  .middleware(Authentication)
  .prefix("/v1")
  .annotate(OpenApi.Title, "Hooks")
{}
