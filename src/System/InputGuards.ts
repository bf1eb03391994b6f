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
import { HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { SqlError } from "@effect/sql/SqlError"
import { Config, Effect } from "effect"
import { NotFound, RequestId, ValidationFailed } from "../Errors.js"

export const HeaderLimitConfig = Config.integer("MAX_HEADER_BYTES").pipe(Config.withDefault(12 * 1024))

/** Bytes of the head as sent: `METHOD url HTTP/1.1`, then `name: value` per header, CRLF-terminated. */
export const requestHeadBytes = (request: HttpServerRequest.HttpServerRequest): number => {
  let bytes = Buffer.byteLength(request.method) + 1 + Buffer.byteLength(request.url) + 11
  for (const [name, value] of Object.entries(request.headers)) bytes += Buffer.byteLength(name) + 2 + Buffer.byteLength(value) + 2
  return bytes
}

/** Serve-level (outside the router): refuses a head over `limit` bytes with 431 and the envelope. */
export const headerLimitMiddleware = (limit: number) => HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (requestHeadBytes(request) <= limit) return yield* app
    const requestId = yield* RequestId
    return HttpServerResponse.unsafeJson(
      {
        error: {
          type: "headers_too_large",
          message: `The request line and headers are larger than ${limit} bytes.`,
          request_id: requestId
        }
      },
      { status: 431, headers: { "x-request-id": requestId, "connection": "close" } }
    )
  })
)

const controlCharacter = /[\u0000-\u001f\u007f]/

const decodedPath = (url: string): string | null => {
  const query = url.indexOf("?")
  const path = query === -1 ? url : url.slice(0, query)
  try {
    return decodeURIComponent(path)
  } catch {
    return null
  }
}

/** API-level: a path with a control character (or an undecodable one) names no resource. */
export const refuseControlCharactersInPath = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const path = decodedPath(request.url)
  if (path === null || controlCharacter.test(path)) {
    return yield* new NotFound({ message: "No resource has a path with control characters or broken percent-encoding." })
  }
})

/** PostgreSQL's answer to text holding U+0000: `invalid byte sequence for encoding "UTF8": 0x00` (22021). */
export const isNulCharacterRefusal = (defect: unknown): boolean => {
  if (!(defect instanceof SqlError)) return false
  const cause: unknown = defect.cause
  return typeof cause === "object" && cause !== null && "code" in cause && cause.code === "22021" &&
    "message" in cause && typeof cause.message === "string" && cause.message.includes("0x00")
}

export const nulCharacterRefused = new ValidationFailed({
  message: "request: text must not contain the NUL character (U+0000)"
})
