/**
 * Keys and access: API keys are `hkl_live_` + 32 URL-safe characters, stored only as a
 * SHA-256 hash and looked up by it (so comparison time never depends on the key's characters).
 * Lookups are cached in process for at most AUTH_CACHE_TTL (default 500 ms), so a revoked key
 * or a suspension takes effect within a second on every server process.
 */
import { Cache, Config, Context, Duration, Effect, Exit, Layer, Option } from "effect"
import { newId, randomToken, sha256Hex } from "../Ids.js"
import { toTimestamp } from "../Schemas.js"
import { allScopes, type Plan, type Scope } from "./Domain.js"
import { KeysRepo } from "./Repo.js"

export const AuthConfig = Config.all({
  cacheTtl: Config.Duration("AUTH_CACHE_TTL").pipe(Config.withDefault(Duration.millis(500)))
})

/** Keys whose lookups are cached at once; past it the least recently used go first. */
const cacheCapacity = 10_000

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

/** A key as it is shown once, when it is created. */
export interface CreatedKey {
  readonly object: "api_key"
  readonly id: string
  readonly api_key: string
  readonly scopes: ReadonlyArray<Scope>
  readonly created_at: string
}

/** What the key service offers: a bearer key's owner, and keys created and revoked. */
export interface AuthService {
  /** The live key's owner, or None for an unknown or revoked key (cached for AUTH_CACHE_TTL). */
  readonly findKey: (plainKey: string) => Effect.Effect<Option.Option<KeyOwner>>
  /** A new key for the account (every scope when none are given); its plain text is shown only here. */
  readonly createKey: (accountId: string, scopes: ReadonlyArray<Scope> | undefined) => Effect.Effect<CreatedKey>
  /** Revokes a key; false when no such key exists. Revoking twice is harmless. */
  readonly revokeKey: (keyId: string) => Effect.Effect<boolean>
}

const make = Effect.gen(function*() {
  const repo = yield* KeysRepo
  const config = yield* AuthConfig

  const lookupByHash = (hash: string) =>
    Effect.map(repo.findLiveKeyByHash(hash), Option.map((row): KeyOwner => ({
      keyId: row.key_id,
      accountId: row.account_id,
      plan: row.plan,
      suspended: row.suspended,
      scopes: row.scopes
    })))

  const cached = yield* Cache.makeWith(lookupByHash, {
    capacity: cacheCapacity,
    // A failed lookup (a defect) is not remembered: the next request asks the database again.
    timeToLive: (exit) => (Exit.isSuccess(exit) ? config.cacheTtl : Duration.zero)
  })
  const cacheOn = Duration.toMillis(config.cacheTtl) > 0

  const findKey = (plainKey: string): Effect.Effect<Option.Option<KeyOwner>> => {
    const hash = sha256Hex(plainKey)
    return cacheOn ? Cache.get(cached, hash) : lookupByHash(hash)
  }

  const createKey = (accountId: string, scopes: ReadonlyArray<Scope> | undefined) =>
    Effect.gen(function*() {
      const id = newId("key")
      const plain = apiKeyPrefix + randomToken(24)
      const granted = [...new Set(scopes ?? allScopes)]
      const { created_at } = yield* repo.insertKey({ id, accountId, keyHash: sha256Hex(plain), scopes: granted })
      return {
        object: "api_key" as const,
        id,
        api_key: plain,
        scopes: granted,
        created_at: toTimestamp(created_at)
      }
    })

  const revokeKey = (keyId: string) => Effect.map(repo.revokeKey(keyId), Option.isSome)

  return Auth.of({ findKey, createKey, revokeKey })
})

export class Auth extends Context.Service<Auth, AuthService>()("hookline/Auth") {
  /** Takes its KeysRepo from the caller (an in-memory one in a test). */
  static readonly layerWithoutDependencies = Layer.effect(Auth, make)
  static readonly layer = Auth.layerWithoutDependencies.pipe(Layer.provide(KeysRepo.layer))
}
