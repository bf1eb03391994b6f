/** Schema building blocks shared by every area's contract. */
import { Schema } from "effect"

/** Object schemas reject properties they do not name (the contract's "no other properties"). */
export const strict = { parseOptions: { onExcessProperty: "error" } } as const

/** ISO 8601 UTC with milliseconds, as every timestamp in a response. */
export const Timestamp = Schema.String.annotations({
  description: "ISO 8601 UTC timestamp with milliseconds, e.g. 2026-11-22T14:28:55.123Z",
  examples: ["2026-11-22T14:28:55.123Z"]
})

/** `list` envelope of the contract (section 2.4). */
export const ListOf = <S extends Schema.Schema.Any>(item: S, identifier: string) =>
  Schema.Struct({
    object: Schema.Literal("list"),
    data: Schema.Array(item),
    has_more: Schema.Boolean,
    next_cursor: Schema.NullOr(Schema.String)
  }).annotations({ identifier })

export const Cursor = Schema.String.annotations({
  description: "Opaque value from the previous page's next_cursor."
})

/** A page's `limit` query parameter: 1 to 100; 50 when absent. */
export const PageLimit = Schema.NumberFromString.pipe(
  Schema.int(),
  Schema.between(1, 100, { message: () => "must be an integer from 1 to 100" })
).annotations({ description: "Page size, 1 to 100; 50 when absent." })

export const toTimestamp = (date: Date): string => date.toISOString()
export const toNullableTimestamp = (date: Date | null): string | null => (date === null ? null : date.toISOString())
