/**
 * Signing per the Standard Webhooks specification (https://www.standardwebhooks.com):
 * `webhook-id` (the event id, the same on every retry, so receivers can dedupe),
 * `webhook-timestamp` (seconds since the epoch, at the attempt) and `webhook-signature`
 * (`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, keyed with the bytes that follow
 * `whsec_`). Several signatures are separated by spaces; verifiers accept any one.
 */
import { createHmac, randomBytes } from "node:crypto"

export const secretPrefix = "whsec_"

/** A new signing secret: `whsec_` + base64 of 32 random bytes. */
export const generateSecret = (): string => secretPrefix + randomBytes(32).toString("base64")

const secretBytes = (secret: string): Buffer =>
  Buffer.from(secret.startsWith(secretPrefix) ? secret.slice(secretPrefix.length) : secret, "base64")

/** One `v1,<base64>` signature. */
export const sign = (secret: string, id: string, timestampSeconds: number, body: string): string =>
  "v1," + createHmac("sha256", secretBytes(secret)).update(`${id}.${timestampSeconds}.${body}`).digest("base64")

/** The three Standard Webhooks headers, signed with every secret given (current first). */
export const signatureHeaders = (
  secrets: ReadonlyArray<string>,
  id: string,
  timestampSeconds: number,
  body: string
): Record<string, string> => ({
  "webhook-id": id,
  "webhook-timestamp": String(timestampSeconds),
  "webhook-signature": secrets.map((secret) => sign(secret, id, timestampSeconds, body)).join(" ")
})

/** The event body, with its fields in a fixed order (the bytes that are signed are the bytes sent). */
export const eventBody = (event: {
  readonly id: string
  readonly type: string
  readonly createdAt: string
  readonly data: unknown
}): string =>
  JSON.stringify({ id: event.id, object: "event", type: event.type, created_at: event.createdAt, data: event.data })
