/**
 * Guards against hostile input that no single route owns (the fuzz test, test/fuzz.test.ts,
 * found the gaps they close):
 *
 * - the request-head limit: the request line and headers together may take at most
 *   MAX_HEADER_BYTES (default 12 KiB); a larger head is answered 431 `headers_too_large` with
 *   the envelope and `Connection: close`, before authentication, rate limits or any reserve.
 *   Behind it Bun has its own hard limits, which answer before any of our code runs and so
 *   without the envelope: a head over 16 KiB (`bun --max-http-header-size`, default 16,384
 *   bytes) or with more than about 150 header fields gets a bare 431 with `Connection: close`.
 *   Keep MAX_HEADER_BYTES below Bun's limit.
 * - control characters in the path: no id or route contains one, so such a path names nothing
 *   and is answered 404 `not_found`, like any unknown path (before authentication, as the
 *   router's own 404 is).
 * - the NUL character in text: PostgreSQL text cannot hold U+0000, and refuses a statement
 *   carrying one. Whatever route lets one through to a statement (its transaction rolled back,
 *   its hold refunded), the answer is 422 `validation_error`, not a 500.
 */
import { Config } from "effect"
import { SqlError } from "effect/sql"
import { ValidationFailed } from "../Errors.js"

export const HeaderLimitConfig = Config.Int("MAX_HEADER_BYTES").pipe(Config.withDefault(12 * 1024))

/**
 * Whether the head as sent (`METHOD url HTTP/1.1`, then `name: value` per header, each line
 * CRLF-terminated) fits in `limit` bytes. UTF-8 takes at most 3 bytes per UTF-16 unit, so
 * the exact byte count is only taken for heads whose length alone cannot decide.
 */
export const requestHeadBytesAtMost = (
  method: string,
  url: string,
  headers: Readonly<Record<string, string | undefined>>,
  limit: number
): boolean => {
  let units = method.length + 1 + url.length + 11
  for (const name in headers) units += name.length + 2 + (headers[name]?.length ?? 0) + 2
  if (units * 3 <= limit) return true
  if (units > limit) return false
  let bytes = Buffer.byteLength(method) + 1 + Buffer.byteLength(url) + 11
  for (const name in headers) bytes += Buffer.byteLength(name) + 2 + Buffer.byteLength(headers[name] ?? "") + 2
  return bytes <= limit
}

const controlCharacter = /[\u0000-\u001f\u007f]/

/** A path with a control character (or broken percent-encoding) names no resource. */
export const hasControlCharacterInPath = (path: string): boolean => {
  if (!path.includes("%")) return controlCharacter.test(path)
  try {
    return controlCharacter.test(decodeURIComponent(path))
  } catch {
    return true
  }
}

/** The SQLSTATE and message PostgreSQL gave for a failed statement, when `defect` is one. */
export const postgresErrorOf = (defect: unknown): { readonly code: string; readonly message: string } | null => {
  if (!SqlError.isSqlError(defect)) return null
  const cause: unknown = defect.reason.cause
  if (typeof cause !== "object" || cause === null || !("code" in cause) || typeof cause.code !== "string") {
    return defect.reason._tag === "StatementTimeoutError" ? { code: "57014", message: defect.message } : null
  }
  const message = "message" in cause && typeof cause.message === "string" ? cause.message : defect.message
  return { code: cause.code, message }
}

/** PostgreSQL's answer to text holding U+0000: `invalid byte sequence for encoding "UTF8": 0x00` (22021). */
export const isNulCharacterRefusal = (defect: unknown): boolean => {
  const error = postgresErrorOf(defect)
  return error !== null && error.code === "22021" && error.message.includes("0x00")
}

/**
 * PostgreSQL cancelled the statement (SQLSTATE 57014, query_canceled): DB_STATEMENT_TIMEOUT, or an
 * operator's pg_cancel_backend. Its transaction rolled back; a metered request refunds its hold.
 */
export const isStatementCancelled = (defect: unknown): boolean => postgresErrorOf(defect)?.code === "57014"

export const nulCharacterRefused = new ValidationFailed({
  message: "request: text must not contain the NUL character (U+0000)"
})
