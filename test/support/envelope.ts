/** The one assertion on the error envelope every test file uses. */
import { expect } from "bun:test"
import type { ErrorBody } from "./server.js"

/**
 * A non-2xx answer as the contract shapes it: the status, `error.type`, a message, and a
 * generated `req_` request id that X-Request-Id repeats.
 */
export const expectEnvelope = (response: { status: number; headers: Headers; body: unknown }, status: number, type: string) => {
  expect(response.status).toBe(status)
  const { error } = response.body as ErrorBody
  expect(error.type).toBe(type)
  expect(typeof error.message).toBe("string")
  expect(error.request_id).toMatch(/^req_[0-9a-f]{32}$/)
  expect(response.headers.get("x-request-id")).toBe(error.request_id)
}
