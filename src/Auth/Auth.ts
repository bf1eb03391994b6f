/**
 * Keys and access: API keys are `hkl_live_` + 32 URL-safe characters, stored only as a
 * SHA-256 hash and looked up by it (so comparison time never depends on the key's characters).
 * Lookups are cached in process for at most AUTH_CACHE_TTL (default 500 ms), so a revoked key
 * or a suspension takes effect within a second on every server process.
 */
import { SqlClient } from "@effect/sql"
import { Cache, Config, Duration, Effect, Fiber, Option, Schema } from "effect"
import { newId, randomToken, sha256Hex } from "../Ids.js"
import { toTimestamp } from "../Schemas.js"
import { allScopes, Plan, Scope } from "./Api.js"

export const AuthConfig = Config.all({
  cacheTtl: Config.duration("AUTH_CACHE_TTL").pipe(Config.withDefault(Duration.millis(500)))
})

export const apiKeyPrefix = "hkl_live_"
/** The shape a bearer key must have before it is looked up. */
export const apiKeyPattern = /^hkl_live_[A-Za-z0-9_-]{16,}$/

export interface KeyOwner {
  readonly keyId: string
  readonly accountId: string
  readonly plan: Plan
  readonly suspended: boolean
  readonly scopes: ReadonlyArray<Scope>
}

const KeyOwnerRow = Schema.Struct({
  key_id: Schema.String,
  account_id: Schema.String,
  plan: Plan,
  suspended: Schema.Boolean,
  scopes: Schema.Array(Scope)
})

export class Auth extends Effect.Service<Auth>()("hookline/Auth", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AuthConfig

    const lookupByHash = (hash: string) =>
      sql`
        SELECT k.id AS key_id, k.account_id, a.plan, a.suspended, k.scopes
          FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.key_hash = ${hash} AND k.revoked_at IS NULL`.pipe(
        Effect.flatMap((rows) =>
          rows.length === 0 ? Effect.succeed(Option.none()) : Effect.map(Schema.decodeUnknown(KeyOwnerRow)(rows[0]), Option.some)
        ),
        Effect.map(Option.map((row): KeyOwner => ({
          keyId: row.key_id,
          accountId: row.account_id,
          plan: row.plan,
          suspended: row.suspended,
          scopes: row.scopes
        }))),
        Effect.orDie
      )

    const cache = yield* Cache.make({
      capacity: 10_000,
      timeToLive: config.cacheTtl,
      lookup: lookupByHash
    })

    /** The live key's owner, or None for an unknown or revoked key. */
    const findKey = (plainKey: string) =>
      Duration.toMillis(config.cacheTtl) > 0
        // Concurrent gets share one lookup, run by the first: that request hanging up must not
        // interrupt it for the others (they would answer 503), so it runs in a fiber of its own.
        ? Effect.flatMap(Effect.forkDaemon(cache.get(sha256Hex(plainKey))), Fiber.join)
        : lookupByHash(sha256Hex(plainKey))

    const createKey = (accountId: string, scopes: ReadonlyArray<Scope> | undefined) =>
      Effect.gen(function*() {
        const id = newId("key")
        const plain = apiKeyPrefix + randomToken(24)
        const granted = [...new Set(scopes ?? allScopes)]
        const rows = yield* sql<{ created_at: Date }>`
          INSERT INTO api_keys (id, account_id, key_hash, scopes)
          VALUES (${id}, ${accountId}, ${sha256Hex(plain)}, string_to_array(${granted.join(",")}, ','))
          RETURNING created_at`
        return {
          object: "api_key" as const,
          id,
          api_key: plain,
          scopes: granted,
          created_at: toTimestamp(rows[0].created_at)
        }
      })

    /** Revokes a key; false when no such key exists. Revoking twice is harmless. */
    const revokeKey = (keyId: string) =>
      sql`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = ${keyId} RETURNING id`.pipe(
        Effect.map((rows) => rows.length > 0)
      )

    return { findKey, createKey, revokeKey } as const
  })
}) {}
