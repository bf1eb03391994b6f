/**
 * Opaque, tamper-proof pagination cursors, shared by every paginated endpoint.
 *
 * A cursor is `base64url(JSON position) . base64url(HMAC-SHA256)`. The MAC covers the position
 * and a *binding*: a string naming the endpoint and everything that shaped the query (account,
 * filters). A cursor that is malformed, altered, or presented to another endpoint or query fails
 * the MAC and answers 400 invalid_cursor; the position schema then checks its shape.
 */
import { Effect, Redacted, Schema } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { InvalidCursor } from "./Errors.js"

const invalid = new InvalidCursor({
  message: "The cursor is malformed, altered, or from another query; pass next_cursor back unchanged with the same parameters."
})

const mac = (secret: Redacted.Redacted<string>, binding: string, body: string): Buffer =>
  createHmac("sha256", Redacted.value(secret)).update(binding).update("\n").update(body).digest()

/** The cursor for `position`, valid only for the same `binding`. */
export const signCursor = (secret: Redacted.Redacted<string>, binding: string, position: unknown): string => {
  const body = Buffer.from(JSON.stringify(position), "utf8").toString("base64url")
  return `${body}.${mac(secret, binding, body).toString("base64url")}`
}

/** The position in `cursor`, or InvalidCursor when it was not made by signCursor for `binding`. */
export const readCursor = <A, I>(
  secret: Redacted.Redacted<string>,
  binding: string,
  cursor: string,
  position: Schema.Schema<A, I>
): Effect.Effect<A, InvalidCursor> =>
  Effect.suspend(() => {
    const parts = cursor.split(".")
    if (parts.length !== 2) return Effect.fail(invalid)
    const [body, signature] = parts
    const given = Buffer.from(signature, "base64url")
    const expected = mac(secret, binding, body)
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return Effect.fail(invalid)
    let decoded: unknown
    try {
      decoded = JSON.parse(Buffer.from(body, "base64url").toString("utf8"))
    } catch {
      return Effect.fail(invalid)
    }
    return Schema.decodeUnknown(position)(decoded).pipe(Effect.mapError(() => invalid))
  })
