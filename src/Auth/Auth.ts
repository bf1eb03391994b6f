/**
 * Keys and access: API keys are `hkl_live_` + 32 URL-safe characters, stored only as a
 * SHA-256 hash and looked up by it (so comparison time never depends on the key's characters).
 * Lookups are cached in process for at most AUTH_CACHE_TTL (default 500 ms), so a revoked key
 * or a suspension takes effect within a second on every server process.
 */
import { Config, Context, Duration, Effect, Layer, Option } from "effect"
import { newId, randomToken, sha256Hex } from "../Ids.js"
import { toTimestamp } from "../Schemas.js"
import { allScopes, type Plan, type Scope } from "./Domain.js"
import { KeysRepo } from "./Repo.js"

export const AuthConfig = Config.all({
  cacheTtl: Config.Duration("AUTH_CACHE_TTL").pipe(Config.withDefault(Duration.millis(500)))
})

/** Keys whose lookups are cached at once; past it expired entries go first, then the oldest. */
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

  // A plain map read synchronously: a hit costs no fiber hop and no Deferred. Time is the fiber's
  // Clock, read without a service lookup, so a test can move it past the TTL.
  const ttlMs = Duration.toMillis(config.cacheTtl)
  const cache = new Map<string, { readonly owner: Option.Option<KeyOwner>; readonly until: number }>()
  // Entries sit in insertion order, which is expiry order (one TTL): expired ones are at the front.
  const remember = (hash: string, owner: Option.Option<KeyOwner>, now: number) => {
    for (const [key, entry] of cache) {
      if (entry.until > now && cache.size < cacheCapacity) break
      cache.delete(key)
    }
    cache.delete(hash)
    cache.set(hash, { owner, until: now + ttlMs })
  }

  /** The live key's owner, or None for an unknown or revoked key. */
  const findKey = (plainKey: string): Effect.Effect<Option.Option<KeyOwner>> => {
    const hash = sha256Hex(plainKey)
    if (ttlMs <= 0) return lookupByHash(hash)
    return Effect.clockWith((clock) => {
      const hit = cache.get(hash)
      if (hit !== undefined && hit.until > clock.currentTimeMillisUnsafe()) return Effect.succeed(hit.owner)
      return Effect.map(lookupByHash(hash), (owner) => {
        remember(hash, owner, clock.currentTimeMillisUnsafe())
        return owner
      })
    })
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

  /** Revokes a key; false when no such key exists. Revoking twice is harmless. */
  const revokeKey = (keyId: string) => Effect.map(repo.revokeKey(keyId), Option.isSome)

  return { findKey, createKey, revokeKey } as const
})

export class Auth extends Context.Service<Auth, Effect.Success<typeof make>>()("hookline/Auth") {
  /** Takes its KeysRepo from the caller (an in-memory one in a test). */
  static readonly layerWithoutDependencies = Layer.effect(Auth, make)
  static readonly layer = Auth.layerWithoutDependencies.pipe(Layer.provide(KeysRepo.layer))
}
