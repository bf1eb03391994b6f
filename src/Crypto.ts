/**
 * Values sealed at rest (webhook signing secrets, idempotent answers): AES-256-GCM under a key
 * derived (HKDF-SHA256) from a server secret, one derived key per purpose. A binding (the GCM
 * associated data, e.g. the owning account) ties each sealed value to its row, so a value copied
 * onto another row does not open.
 *
 * Stored form: `v1.` + base64url(12-byte nonce ‖ 16-byte tag ‖ ciphertext).
 */
import { Result } from "effect"
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto"

/** Why a stored value did not open. */
export type UnsealFailure = "unknown_format" | "truncated" | "wrong_key"

export interface Sealer {
  readonly seal: (plain: string, binding: string) => string
  readonly open: (sealed: string, binding: string) => Result.Result<string, UnsealFailure>
}

const version = "v1."
const nonceBytes = 12
const tagBytes = 16

/** `purpose` names the derived key (e.g. "webhook-secret-v1"): values sealed for one purpose never open for another. */
export const makeSealer = (serverKey: string, purpose: string): Sealer => {
  const key = Buffer.from(hkdfSync("sha256", Buffer.from(serverKey, "utf8"), "hookline", purpose, 32))

  const seal = (plain: string, binding: string): string => {
    const nonce = randomBytes(nonceBytes)
    const cipher = createCipheriv("aes-256-gcm", key, nonce)
    cipher.setAAD(Buffer.from(binding, "utf8"))
    const ciphertext = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()])
    return version + Buffer.concat([nonce, cipher.getAuthTag(), ciphertext]).toString("base64url")
  }

  const open = (sealed: string, binding: string): Result.Result<string, UnsealFailure> => {
    if (!sealed.startsWith(version)) return Result.fail("unknown_format")
    const raw = Buffer.from(sealed.slice(version.length), "base64url")
    // An empty plaintext seals to nonce and tag alone, so only shorter is truncated.
    if (raw.length < nonceBytes + tagBytes) return Result.fail("truncated")
    try {
      const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, nonceBytes))
      decipher.setAAD(Buffer.from(binding, "utf8"))
      decipher.setAuthTag(raw.subarray(nonceBytes, nonceBytes + tagBytes))
      return Result.succeed(Buffer.concat([decipher.update(raw.subarray(nonceBytes + tagBytes)), decipher.final()]).toString("utf8"))
    } catch {
      return Result.fail("wrong_key")
    }
  }

  return { seal, open }
}
