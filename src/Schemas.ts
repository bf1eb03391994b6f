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

export const toTimestamp = (date: Date): string => date.toISOString()
export const toNullableTimestamp = (date: Date | null): string | null => (date === null ? null : date.toISOString())
