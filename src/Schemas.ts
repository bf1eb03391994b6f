/** Schema building blocks shared by every area's contract. */
import { Schema, SchemaTransformation } from "effect"

/**
 * Parse options that reject properties a schema does not name (the contract's "no other
 * properties"). Parse options belong to an endpoint in HttpApi, per part of the request:
 * `endpoint.annotate(HttpApi.QueryParseOptions, strict)` (or `PayloadParseOptions`).
 */
export const strict = { onExcessProperty: "error" } as const

/** ISO 8601 UTC with milliseconds, as every timestamp in a response. */
export const Timestamp = Schema.String.annotate({
  description: "ISO 8601 UTC timestamp with milliseconds, e.g. 2026-11-22T14:28:55.123Z",
  examples: ["2026-11-22T14:28:55.123Z"]
})

/** `list` envelope of the contract (section 2.4). */
export const ListOf = <S extends Schema.Top>(item: S, identifier: string) =>
  Schema.Struct({
    object: Schema.Literal("list"),
    data: Schema.Array(item),
    has_more: Schema.Boolean,
    next_cursor: Schema.NullOr(Schema.String)
  }).annotate({ identifier })

export const Cursor = Schema.String.annotate({
  description: "Opaque value from the previous page's next_cursor."
})

const pageLimitRule = "must be an integer from 1 to 100"

/**
 * A page's `limit` query parameter: 1 to 100; 50 when absent. The description sits on the string
 * side, the one OpenAPI shows for a query parameter.
 */
export const PageLimit = Schema.String.annotate({ description: "Page size, 1 to 100; 50 when absent." }).pipe(
  Schema.decodeTo(
    Schema.Finite.check(Schema.isInt({ message: pageLimitRule }), Schema.isBetween({ minimum: 1, maximum: 100 }, { message: pageLimitRule })),
    SchemaTransformation.numberFromString
  )
)

const calendarFields = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-](\d{2}):?(\d{2}))?)?$/i

/**
 * Whether an ISO 8601 date or date-time names a moment that exists: month 1–12, a day its month
 * has (2026-02-30 does not), hours to 23, minutes and seconds to 59, an offset within a day.
 * `Date` would read such a value by rolling it over (2026-02-30 as 2026-03-02).
 */
export const existsOnCalendar = (value: string): boolean => {
  const fields = calendarFields.exec(value)
  if (fields === null) return false
  const [year, month, day, hour, minute, second, offsetHours, offsetMinutes] = fields.slice(1).map((field) =>
    field === undefined ? 0 : Number(field)
  )
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
  const daysInMonth = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0
  return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth && hour <= 23 && minute <= 59 && second <= 59 &&
    offsetHours <= 23 && offsetMinutes <= 59
}

/** The message of a date or date-time that has the right form but names no moment on the calendar. */
export const notOnCalendar = "must be a date that exists on the calendar (e.g. February has no 30th), with a time up to 23:59:59"

export const toTimestamp = (date: Date): string => date.toISOString()
export const toNullableTimestamp = (date: Date | null): string | null => (date === null ? null : date.toISOString())

/**
 * A date (`2026-11-22`, midnight UTC) or a date-time with Z or an offset. The description goes on
 * the string, the side the query string and the OpenAPI document show; the `u` flag lets the
 * pattern into the document.
 */
const timestampPattern = /^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2}))?$/u

export const timestampInput = (description: string) =>
  Schema.String.check(
    Schema.isPattern(timestampPattern, {
      message: "must be an ISO 8601 date or date-time with Z or an offset, e.g. 2026-11-22T14:28:55.123Z"
    }),
    // A value of the wrong form is the pattern's to report.
    Schema.makeFilter((value: string) => !timestampPattern.test(value) || existsOnCalendar(value), { message: notOnCalendar })
  ).annotate({ description }).pipe(Schema.decodeTo(Schema.Date, SchemaTransformation.dateFromString))
