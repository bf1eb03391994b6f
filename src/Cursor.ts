/**
 * Opaque, tamper-proof pagination cursors, shared by every paginated endpoint.
 *
 * Wire form: base64url( version byte ‖ 16-byte HMAC-SHA256 tag ‖ JSON position ). The tag covers
 * a *binding* (the endpoint and everything that shaped the query: account, normalised text,
 * filters) as well as the position, so a cursor that is malformed, altered, or replayed on
 * another endpoint or query fails verification and the request gets 400 invalid_cursor. The
 * position schema then checks the shape. Cursors carry no expiry: a keyset position stays valid.
 */
import { Effect, Option, Redacted, Schema } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { InvalidCursor } from "./Errors.js"

const version = 1
const tagBytes = 16
const maxCursorLength = 1024

const tagOf = (secret: Redacted.Redacted<string>, binding: string, payload: Buffer): Buffer =>
  createHmac("sha256", Redacted.value(secret))
    .update(`hookline-cursor/v${version}\0${binding}\0`)
    .update(payload)
    .digest()
    .subarray(0, tagBytes)

/** The cursor for `position`, valid only for the same `binding`. */
export const signCursor = (secret: Redacted.Redacted<string>, binding: string, position: unknown): string => {
  const payload = Buffer.from(JSON.stringify(position), "utf8")
  return Buffer.concat([Buffer.of(version), tagOf(secret, binding, payload), payload]).toString("base64url")
}

/** The position in `cursor`, or None when signCursor did not make it for `binding`. */
export const decodeCursor = <A, I>(
  secret: Redacted.Redacted<string>,
  binding: string,
  cursor: string,
  position: Schema.Codec<A, I>
): Option.Option<A> => {
  if (cursor.length === 0 || cursor.length > maxCursorLength || !/^[A-Za-z0-9_-]+$/.test(cursor)) return Option.none()
  const raw = Buffer.from(cursor, "base64url")
  if (raw.length <= 1 + tagBytes || raw[0] !== version) return Option.none()
  const payload = raw.subarray(1 + tagBytes)
  if (!timingSafeEqual(raw.subarray(1, 1 + tagBytes), tagOf(secret, binding, payload))) return Option.none()
  let parsed: unknown
  try {
    parsed = JSON.parse(payload.toString("utf8"))
  } catch {
    return Option.none()
  }
  return Schema.decodeUnknownOption(position)(parsed)
}

const invalidCursor = new InvalidCursor({
  message: "The cursor is malformed, altered, or belongs to another query; pass next_cursor back unchanged with the same parameters, or start again without it."
})

/** The request's optional `cursor` parameter as a position: None for the first page, 400 invalid_cursor when bad. */
export const readCursor = <A, I>(
  secret: Redacted.Redacted<string>,
  binding: string,
  cursor: string | undefined,
  position: Schema.Codec<A, I>
): Effect.Effect<Option.Option<A>, InvalidCursor> =>
  cursor === undefined
    ? Effect.succeed(Option.none())
    : Option.match(decodeCursor(secret, binding, cursor, position), {
      onNone: () => Effect.fail(invalidCursor),
      onSome: (value) => Effect.succeed(Option.some(value))
    })

/**
 * A keyset page from `rows` fetched with LIMIT limit + 1: the first `limit` rows as `data`, and
 * when there was one more, a cursor for the position of the last row shown.
 */
export const keysetPage = <Row, Item>(
  rows: ReadonlyArray<Row>,
  limit: number,
  toItem: (row: Row) => Item,
  cursorAfter: (last: Row) => string
) => {
  const page = rows.slice(0, limit)
  const last = page[page.length - 1]
  const hasMore = rows.length > limit && last !== undefined
  return {
    object: "list" as const,
    data: page.map(toItem),
    has_more: hasMore,
    next_cursor: hasMore ? cursorAfter(last) : null
  }
}
