/** Identifiers: a prefix plus the 32 hex characters of a UUIDv7 (time-ordered, append-only indexes). */
import { randomBytes, timingSafeEqual } from "node:crypto"

export type IdPrefix = "hook" | "pred" | "upl" | "evt" | "acct" | "key" | "req" | "txn" | "hold" | "dlv" | "grant"

export const newId = (prefix: IdPrefix): string => `${prefix}_${Bun.randomUUIDv7().replaceAll("-", "")}`

export const idPattern = (prefix: IdPrefix): RegExp => new RegExp(`^${prefix}_[0-9a-f]{32}$`)

/** Bun's one-shot hasher: a fifth of node:crypto's createHash per call (every request hashes its key). */
export const sha256Hex = (value: string): string => Bun.SHA256.hash(value, "hex")

/** Compares digests, so the time taken says nothing about how much of a secret token matched. */
export const sameSecret = (given: string, expected: string): boolean =>
  timingSafeEqual(Buffer.from(sha256Hex(given), "hex"), Buffer.from(sha256Hex(expected), "hex"))

/** `bytes` of randomness as URL-safe base64 (no padding). */
export const randomToken = (bytes: number): string => randomBytes(bytes).toString("base64url")
