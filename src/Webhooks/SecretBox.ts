/**
 * Webhook signing secrets at rest, sealed (Crypto.ts) under the server's WEBHOOK_SECRET_KEY so a
 * database dump alone does not reveal them. The account id is the binding, so a ciphertext
 * copied onto another account's row does not open.
 */
import { Data, Result } from "effect"
import { makeSealer, type UnsealFailure } from "../Crypto.js"

export class SecretUnreadable extends Data.TaggedError("SecretUnreadable")<{ readonly message: string }> {}

export interface SecretBox {
  readonly seal: (secret: string, accountId: string) => string
  readonly open: (stored: string, accountId: string) => Result.Result<string, SecretUnreadable>
}

const messages: Record<UnsealFailure, string> = {
  unknown_format: "the stored secret has an unknown format",
  truncated: "the stored secret is truncated",
  wrong_key: "the stored secret does not open with this server's WEBHOOK_SECRET_KEY"
}

export const makeSecretBox = (serverKey: string): SecretBox => {
  const sealer = makeSealer(serverKey, "webhook-secret-v1")
  return {
    seal: sealer.seal,
    open: (stored, accountId) =>
      Result.mapError(sealer.open(stored, accountId), (failure) => new SecretUnreadable({ message: messages[failure] }))
  }
}
