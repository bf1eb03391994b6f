/**
 * A hook as it is written into the catalog (by import or the demo generator): the HookRich
 * shape with an id. Imported records may leave the id out: it is then derived from platform +
 * source_url, so importing the same source again updates the hook instead of duplicating it.
 */
import { Effect, Result, Schema, SchemaIssue, SchemaTransformation } from "effect"
import { sha256Hex } from "../Ids.js"
import { existsOnCalendar } from "../Schemas.js"
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
const normalisedDateTime = (value: string): string | null => {
  const time = isoDateTime.test(value) && existsOnCalendar(value) ? Date.parse(value) : Number.NaN
  return Number.isNaN(time) ? null : new Date(time).toISOString()
}

/** Checked, then normalised (the check has refused every value the normalisation cannot read). */
const PublishedAt = Schema.String.check(
  Schema.makeFilter((value: string) => normalisedDateTime(value) !== null, {
    message: "must be an ISO 8601 date-time with a time zone, e.g. 2025-06-01T12:00:00.000Z"
  })
).pipe(Schema.decodeTo(
  Schema.String,
  SchemaTransformation.transform({ decode: (value) => normalisedDateTime(value) ?? value, encode: (value) => value })
))

const Text = (max: number) => Schema.String.check(Schema.isMaxLength(max))
const NonNegative = Schema.Number.check(Schema.isFinite(), Schema.isGreaterThanOrEqualTo(0))
const Weight = Schema.Number.check(Schema.isFinite(), Schema.isBetween({ minimum: 0, maximum: 100 }))

/** A nullable field an import may leave out (absent means null). */
const nullable = <S extends Schema.Top>(schema: S) => Schema.NullOr(schema).pipe(Schema.withDecodingDefaultKey(Effect.succeed(null)))

/** Longest value of each free-text field, in UTF-16 code units (what Schema.isMaxLength counts). */
const textLimits = { platform: 64, media_type: 64, thumbnail_url: 2_048, source_url: 2_048, caption: 10_000, summary: 10_000, themeWord: 200 } as const

const Emotions = Schema.Struct({
  inspiration: Weight,
  fear: Weight,
  curiosity: Weight,
  satisfaction: Weight,
  happiness: Weight,
  anger: Weight,
  surprise: Weight
})

const CommentTheme = Schema.Struct({
  word: Text(textLimits.themeWord),
  count: NonNegative
})

const notBlank = /\S/
const isHookId = Schema.is(HookId)
const isCategorySlug = Schema.is(CategorySlug)

export const HookImportRecord = Schema.Struct({
  id: Schema.optional(HookId),
  text: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(maxHookTextLength), Schema.isPattern(notBlank, { message: "must not be blank" })),
  platform: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(textLimits.platform)),
  media_type: nullable(Text(textLimits.media_type)),
  thumbnail_url: nullable(Text(textLimits.thumbnail_url)),
  category: nullable(CategorySlug),
  hook_duration_sec: nullable(NonNegative),
  published_at: nullable(PublishedAt),
  source_url: nullable(Text(textLimits.source_url)),
  caption: nullable(Text(textLimits.caption)),
  duration_sec: nullable(NonNegative),
  summary: nullable(Text(textLimits.summary)),
  emotions: nullable(Emotions),
  comment_themes: nullable(Schema.Array(CommentTheme)),
  metrics: nullable(Schema.Unknown),
  creator: nullable(Schema.Unknown),
  audio: nullable(Schema.Unknown)
})
type HookImportRecord = typeof HookImportRecord.Type

// A record names only the fields of a hook: an unknown one is refused, not dropped.
const decodeImport = Schema.decodeUnknownResult(HookImportRecord, { errors: "first", onExcessProperty: "error", reportInput: true })

/** Rules in the words of the import report; filters keep their own `message`. */
const formatIssue = SchemaIssue.makeFormatterStandardSchemaV1({
  leafHook: (issue) => {
    switch (issue._tag) {
      case "MissingKey":
        return "is required"
      case "UnexpectedKey":
        return "is not a field of a hook"
      default:
        return SchemaIssue.defaultLeafHook(issue)
    }
  }
})

/** One readable sentence for the first problem of a record: `field: rule`. */
const describe = (error: Schema.SchemaError): string => {
  const issue = formatIssue(error.issue).issues[0]
  if (issue === undefined) return "not a valid hook"
  const path = (issue.path ?? []).map((segment) => String(typeof segment === "object" ? segment.key : segment))
  const rule = issue.message.replace(/^Expected (.*), got (.*)$/s, "must be $1, got $2")
  return `${path.length === 0 ? "record" : path.join(".")}: ${rule}`
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

/** Whether any string (value or key) holds U+0000; allocates nothing, unlike nulCharacterAt. */
const holdsNul = (value: unknown): boolean => {
  if (typeof value === "string") return value.includes("\0")
  if (Array.isArray(value)) return value.some(holdsNul)
  if (!isFields(value)) return false
  // for…in: parsed JSON has only own keys, and this builds no [key, value] pairs (Object.entries did).
  for (const key in value) if (key.includes("\0") || holdsNul(value[key])) return true
  return false
}

const fieldNames: ReadonlySet<string> = new Set(Object.keys(HookImportRecord.fields))
const emotionNames = Object.keys(Emotions.fields) as ReadonlyArray<keyof typeof Emotions.Type>

type Fields = Readonly<Record<string, unknown>>
const isFields = (value: unknown): value is Fields => typeof value === "object" && value !== null && !Array.isArray(value)
const isAmount = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value) && value >= 0
const isWeight = (value: unknown): value is number => isAmount(value) && value <= 100
/** A nullable text field: its value (null when absent), or undefined when it breaks the limit. */
const optionalText = (value: unknown, max: number): string | null | undefined =>
  value === undefined || value === null ? null : typeof value === "string" && value.length <= max ? value : undefined
const optionalAmount = (value: unknown): number | null | undefined =>
  value === undefined || value === null ? null : isAmount(value) ? value : undefined

const quickEmotions = (value: unknown): HookImportRecord["emotions"] | undefined => {
  if (value === undefined || value === null) return null
  if (!isFields(value) || Object.keys(value).length !== emotionNames.length) return undefined
  const emotions: Record<string, number> = {}
  for (const name of emotionNames) {
    const weight = value[name]
    if (!isWeight(weight)) return undefined
    emotions[name] = weight
  }
  return emotions as HookImportRecord["emotions"]
}

const quickThemes = (value: unknown): HookImportRecord["comment_themes"] | undefined => {
  if (value === undefined || value === null) return null
  if (!Array.isArray(value)) return undefined
  const themes: Array<{ word: string; count: number }> = []
  for (const theme of value) {
    if (!isFields(theme) || Object.keys(theme).length !== 2) return undefined
    const { word, count } = theme
    if (typeof word !== "string" || word.length > textLimits.themeWord || !isAmount(count)) return undefined
    themes.push({ word, count })
  }
  return themes
}

/**
 * The Schema's decoding of HookImportRecord for the common case, without its interpreter (which
 * cost ~250 µs a record, most of an import's time). It answers exactly what decoding gives, or
 * undefined when unsure: that value then goes through the Schema, which also words the rejection.
 * test/hook-record.test.ts checks the two agree.
 */
const quickDecode = (value: unknown): HookImportRecord | undefined => {
  if (!isFields(value)) return undefined
  for (const key of Object.keys(value)) if (!fieldNames.has(key)) return undefined
  const { id, text, platform } = value
  if (id !== undefined && !isHookId(id)) return undefined
  if (typeof text !== "string" || text.length < 1 || text.length > maxHookTextLength || !notBlank.test(text)) return undefined
  if (typeof platform !== "string" || platform.length < 1 || platform.length > textLimits.platform) return undefined
  const category = value.category ?? null
  if (category !== null && !isCategorySlug(category)) return undefined
  const publishedAt = value.published_at ?? null
  if (publishedAt !== null && typeof publishedAt !== "string") return undefined
  const published_at = publishedAt === null ? null : normalisedDateTime(publishedAt)
  if (published_at === null && publishedAt !== null) return undefined
  const record = {
    text,
    platform,
    media_type: optionalText(value.media_type, textLimits.media_type),
    thumbnail_url: optionalText(value.thumbnail_url, textLimits.thumbnail_url),
    category,
    hook_duration_sec: optionalAmount(value.hook_duration_sec),
    published_at,
    source_url: optionalText(value.source_url, textLimits.source_url),
    caption: optionalText(value.caption, textLimits.caption),
    duration_sec: optionalAmount(value.duration_sec),
    summary: optionalText(value.summary, textLimits.summary),
    emotions: quickEmotions(value.emotions),
    comment_themes: quickThemes(value.comment_themes),
    metrics: value.metrics ?? null,
    creator: value.creator ?? null,
    audio: value.audio ?? null
  }
  for (const field of Object.values(record)) if (field === undefined) return undefined
  return (id === undefined ? record : { id, ...record }) as HookImportRecord
}

const decodeRecord = (value: unknown): Result.Result<HookImportRecord, string> => {
  const quick = quickDecode(value)
  return quick === undefined ? Result.mapError(decodeImport(value), describe) : Result.succeed(quick)
}

/** Validates one imported value; the id is derived when absent (source_url is then required). */
export const validateHookRecord = (value: unknown): Result.Result<HookRecord, string> => {
  const nulPath = holdsNul(value) ? nulCharacterAt(value, []) : null
  if (nulPath !== null) {
    return Result.fail(`${nulPath.length === 0 ? "record" : nulPath.map(String).join(".")}: must not contain the NUL character (U+0000)`)
  }
  return Result.flatMap(decodeRecord(value), (record): Result.Result<HookRecord, string> => {
    const { id, ...fields } = record
    if (id !== undefined) return Result.succeed({ id, ...fields })
    if (fields.source_url === null) return Result.fail("id: is required when source_url is null (the id is derived from platform + source_url)")
    return Result.succeed({ id: derivedHookId(fields.platform, fields.source_url), ...fields })
  })
}

/** For the agreement test only: the Schema's and the quick path's decoding of one value. */
export const decodersForTest = { schema: (value: unknown) => Result.getSuccess(decodeImport(value)), quick: quickDecode }
