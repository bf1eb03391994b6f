/**
 * Pagination cursors: a keyset position (never an offset), opaque and tamper-proof.
 *
 * Wire form: base64url( version byte ‖ 16-byte HMAC-SHA256 tag ‖ JSON position ). The tag covers
 * the endpoint and the normalised query (or category) as well as the position, so a cursor that
 * is altered, or replayed on another endpoint or another query, fails verification and the
 * request gets 400 invalid_cursor. Cursors carry no expiry: a position stays meaningful.
 */
import { Either, Option, Redacted, Schema } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"

const version = 1
const tagBytes = 16

export type CursorEndpoint = "search" | "list"

/** Where the next search page starts: the last row's (k1, sort_ms, id); see hook_search_page. */
export const SearchPosition = Schema.Tuple(Schema.NullOr(Schema.Number), Schema.Int, Schema.String)
export type SearchPosition = typeof SearchPosition.Type

/** Where the next list page starts: the last row's (sort_ms, id). */
export const ListPosition = Schema.Tuple(Schema.Int, Schema.String)
export type ListPosition = typeof ListPosition.Type

const positions = { search: SearchPosition, list: ListPosition } as const
type PositionOf<E extends CursorEndpoint> = typeof positions[E]["Type"]
const decoders = {
  search: Schema.decodeUnknownEither(SearchPosition),
  list: Schema.decodeUnknownEither(ListPosition)
} as const

const tagOf = (secret: string, endpoint: CursorEndpoint, binding: string, payload: Buffer): Buffer =>
  createHmac("sha256", secret)
    .update(`hookline-cursor/v${version}\0${endpoint}\0${binding}\0`)
    .update(payload)
    .digest()
    .subarray(0, tagBytes)

export interface Cursors {
  readonly encode: <E extends CursorEndpoint>(endpoint: E, binding: string, position: PositionOf<E>) => string
  /** None when the cursor is malformed, altered, or made for another endpoint or query. */
  readonly decode: <E extends CursorEndpoint>(endpoint: E, binding: string, cursor: string) => Option.Option<PositionOf<E>>
}

export const makeCursors = (secret: Redacted.Redacted<string>): Cursors => {
  const key = Redacted.value(secret)
  return {
    encode: (endpoint, binding, position) => {
      const payload = Buffer.from(JSON.stringify(position), "utf8")
      return Buffer.concat([Buffer.of(version), tagOf(key, endpoint, binding, payload), payload]).toString("base64url")
    },
    decode: <E extends CursorEndpoint>(endpoint: E, binding: string, cursor: string): Option.Option<PositionOf<E>> => {
      if (cursor.length === 0 || cursor.length > 1024 || !/^[A-Za-z0-9_-]+$/.test(cursor)) return Option.none()
      const raw = Buffer.from(cursor, "base64url")
      if (raw.length <= 1 + tagBytes || raw[0] !== version) return Option.none()
      const tag = raw.subarray(1, 1 + tagBytes)
      const payload = raw.subarray(1 + tagBytes)
      if (!timingSafeEqual(tag, tagOf(key, endpoint, binding, payload))) return Option.none()
      let parsed: unknown
      try {
        parsed = JSON.parse(payload.toString("utf8"))
      } catch {
        return Option.none()
      }
      const decode = decoders[endpoint] as (input: unknown) => Either.Either<PositionOf<E>, unknown>
      return Either.getRight(decode(parsed))
    }
  }
}
