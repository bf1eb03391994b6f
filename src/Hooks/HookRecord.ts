/**
 * A hook as it is written into the catalog (by import or the demo generator): the HookRich
 * shape with an id. Imported records may leave the id out: it is then derived from platform +
 * source_url, so importing the same source again updates the hook instead of duplicating it.
 */
import { Either, ParseResult, Schema } from "effect"
import { sha256Hex } from "../Ids.js"
import { CategorySlug, HookId, type HookRich } from "./Api.js"

export type HookRecord = HookRich

/** `hook_` + the first 32 hex characters of sha256(platform + "\n" + source_url). */
export const derivedHookId = (platform: string, sourceUrl: string): string =>
  `hook_${sha256Hex(`${platform}\n${sourceUrl}`).slice(0, 32)}`

/**
 * Hook copy is an opening line; the cap also keeps every search index entry (which carries the
 * text's tsvector) far below PostgreSQL's B-tree entry limit.
 */
export const maxHookTextLength = 500

const isoDateTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})$/i

/** An ISO 8601 date-time with a zone, normalised to UTC with milliseconds (what responses show). */
const PublishedAt = Schema.transformOrFail(Schema.String, Schema.String, {
  strict: true,
  decode: (value, _options, ast) => {
    const time = isoDateTime.test(value) ? Date.parse(value) : Number.NaN
    return Number.isNaN(time)
      ? ParseResult.fail(new ParseResult.Type(ast, value, "must be an ISO 8601 date-time with a time zone, e.g. 2025-06-01T12:00:00.000Z"))
      : ParseResult.succeed(new Date(time).toISOString())
  },
  encode: ParseResult.succeed
})

const Text = (max: number) => Schema.String.pipe(Schema.maxLength(max))
const NonNegative = Schema.Number.pipe(Schema.finite(), Schema.nonNegative())
const Weight = Schema.Number.pipe(Schema.finite(), Schema.between(0, 100))

/** A nullable field an import may leave out (absent means null). */
const nullable = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(Schema.NullOr(schema), { default: () => null })

export const HookImportRecord = Schema.Struct({
  id: Schema.optional(HookId),
  text: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(maxHookTextLength), Schema.pattern(/\S/, { message: () => "must not be blank" })),
  platform: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(64)),
  media_type: nullable(Text(64)),
  thumbnail_url: nullable(Text(2_048)),
  category: nullable(CategorySlug),
  hook_duration_sec: nullable(NonNegative),
  published_at: nullable(PublishedAt),
  source_url: nullable(Text(2_048)),
  caption: nullable(Text(10_000)),
  duration_sec: nullable(NonNegative),
  summary: nullable(Text(10_000)),
  emotions: nullable(Schema.Struct({
    inspiration: Weight,
    fear: Weight,
    curiosity: Weight,
    satisfaction: Weight,
    happiness: Weight,
    anger: Weight,
    surprise: Weight
  })),
  comment_themes: nullable(Schema.Array(Schema.Struct({
    word: Schema.String.pipe(Schema.maxLength(200)),
    count: NonNegative
  }))),
  metrics: nullable(Schema.Unknown),
  creator: nullable(Schema.Unknown),
  audio: nullable(Schema.Unknown)
}).annotations({ parseOptions: { onExcessProperty: "error" } })

const decodeImport = Schema.decodeUnknownEither(HookImportRecord, { errors: "first" })

/** One readable sentence for the first problem of a record: `field: rule`. */
const describe = (error: ParseResult.ParseError): string => {
  const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
  if (issue === undefined) return "not a valid hook"
  const field = issue.path.length === 0 ? "record" : issue.path.map(String).join(".")
  const rule = issue.message
    .replace(/^Expected (.*), actual (.*)$/s, "must be $1, got $2")
    .replace(/^is unexpected, expected: .*$/s, "is not a field of a hook")
    .replace(/^is missing$/, "is required")
  return `${field}: ${rule}`
}

/**
 * The path of the first string (value or key) holding U+0000, which PostgreSQL text and jsonb
 * cannot store: caught per record, so one such line is rejected instead of failing its batch.
 */
const nulCharacterAt = (value: unknown, path: ReadonlyArray<string | number>): ReadonlyArray<string | number> | null => {
  if (typeof value === "string") return value.includes("\0") ? path : null
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = nulCharacterAt(value[index], [...path, index])
      if (found !== null) return found
    }
    return null
  }
  if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      if (key.includes("\0")) return [...path, key]
      const found = nulCharacterAt(item, [...path, key])
      if (found !== null) return found
    }
  }
  return null
}

/** Validates one imported value; the id is derived when absent (source_url is then required). */
export const validateHookRecord = (value: unknown): Either.Either<HookRecord, string> => {
  const nulPath = nulCharacterAt(value, [])
  if (nulPath !== null) {
    return Either.left(`${nulPath.length === 0 ? "record" : nulPath.map(String).join(".")}: must not contain the NUL character (U+0000)`)
  }
  return Either.flatMap(Either.mapLeft(decodeImport(value), describe), (record): Either.Either<HookRecord, string> => {
    const { id, ...fields } = record
    if (id !== undefined) return Either.right({ id, ...fields })
    if (fields.source_url === null) return Either.left("id: is required when source_url is null (the id is derived from platform + source_url)")
    return Either.right({ id: derivedHookId(fields.platform, fields.source_url), ...fields })
  })
}
