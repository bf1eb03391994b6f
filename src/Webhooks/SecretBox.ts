/**
 * Webhook signing secrets at rest: AES-256-GCM under a key derived (HKDF-SHA256) from the
 * server's WEBHOOK_SECRET_KEY, so a database dump alone does not reveal them. The account id is
 * bound in as associated data, so a ciphertext copied onto another account's row does not open.
 *
 * Stored form: `v1.` + base64url(12-byte nonce ‖ 16-byte tag ‖ ciphertext).
 */
import { Data, Either } from "effect"
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto"

export class SecretUnreadable extends Data.TaggedError("SecretUnreadable")<{ readonly message: string }> {}

export interface SecretBox {
  readonly seal: (secret: string, accountId: string) => string
  readonly open: (stored: string, accountId: string) => Either.Either<string, SecretUnreadable>
}

const version = "v1."
const nonceBytes = 12
const tagBytes = 16

export const makeSecretBox = (serverKey: string): SecretBox => {
  const key = Buffer.from(hkdfSync("sha256", Buffer.from(serverKey, "utf8"), "hookline", "webhook-secret-v1", 32))

  const seal = (secret: string, accountId: string): string => {
    const nonce = randomBytes(nonceBytes)
    const cipher = createCipheriv("aes-256-gcm", key, nonce)
    cipher.setAAD(Buffer.from(accountId, "utf8"))
    const ciphertext = Buffer.concat([cipher.update(secret, "utf8"), cipher.final()])
    return version + Buffer.concat([nonce, cipher.getAuthTag(), ciphertext]).toString("base64url")
  }

  const open = (stored: string, accountId: string): Either.Either<string, SecretUnreadable> => {
    if (!stored.startsWith(version)) {
      return Either.left(new SecretUnreadable({ message: "the stored secret has an unknown format" }))
    }
    const raw = Buffer.from(stored.slice(version.length), "base64url")
    if (raw.length <= nonceBytes + tagBytes) {
      return Either.left(new SecretUnreadable({ message: "the stored secret is truncated" }))
    }
    try {
      const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, nonceBytes))
      decipher.setAAD(Buffer.from(accountId, "utf8"))
      decipher.setAuthTag(raw.subarray(nonceBytes, nonceBytes + tagBytes))
      const plain = Buffer.concat([decipher.update(raw.subarray(nonceBytes + tagBytes)), decipher.final()])
      return Either.right(plain.toString("utf8"))
    } catch {
      return Either.left(
        new SecretUnreadable({ message: "the stored secret does not open with this server's WEBHOOK_SECRET_KEY" })
      )
    }
  }

  return { seal, open }
}
