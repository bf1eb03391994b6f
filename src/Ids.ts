/** Identifiers: a prefix plus the 32 hex characters of a UUIDv7 (time-ordered, append-only indexes). */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

export type IdPrefix = "hook" | "pred" | "upl" | "evt" | "acct" | "key" | "req" | "txn" | "hold" | "dlv"

export const newId = (prefix: IdPrefix): string => `${prefix}_${Bun.randomUUIDv7().replaceAll("-", "")}`

export const idPattern = (prefix: IdPrefix): RegExp => new RegExp(`^${prefix}_[0-9a-f]{32}$`)

export const sha256Hex = (value: string): string => createHash("sha256").update(value).digest("hex")

/** Compares digests, so the time taken says nothing about how much of a secret token matched. */
export const sameSecret = (given: string, expected: string): boolean =>
  timingSafeEqual(Buffer.from(sha256Hex(given), "hex"), Buffer.from(sha256Hex(expected), "hex"))

/** `bytes` of randomness as URL-safe base64 (no padding). */
export const randomToken = (bytes: number): string => randomBytes(bytes).toString("base64url")
