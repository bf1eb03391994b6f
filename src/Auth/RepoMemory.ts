/**
 * KeysRepo in memory: the same methods as the PostgreSQL repository, over a Map, with time from
 * Effect's Clock. For tests of key handling (Auth's cache, revocation, suspension) that need no
 * database; the PostgreSQL repository remains the proof of the SQL.
 *
 * A key's plan and suspension are read from an accounts map, as the SQL joins `accounts`: pass
 * the AccountsRepo memory's (src/Admin/RepoMemory.ts) so both repositories see the same accounts.
 */
import { Clock, Effect, Layer, Option } from "effect"
import type { Plan, Scope } from "./Domain.js"
import { KeysRepo } from "./Repo.js"

export interface MemoryKey {
  readonly id: string
  readonly accountId: string
  readonly keyHash: string
  readonly scopes: ReadonlyArray<Scope>
  readonly createdAt: number
  /** Epoch milliseconds; null: live. */
  revokedAt: number | null
}

/** What a key lookup reads of its account. */
export interface KeyAccount {
  readonly plan: Plan
  readonly suspended: boolean
}

export interface MemoryKeysState {
  keys: Map<string, MemoryKey>
  /** The accounts keys belong to, by id (shared with the AccountsRepo memory when given). */
  readonly accounts: ReadonlyMap<string, KeyAccount>
}

type Repo = KeysRepo["Service"]

/** A fresh in-memory api_keys table over `accounts`: its layer, and its state for a test to read. */
export const makeKeysRepoInMemory = (seed: {
  readonly accounts?: ReadonlyMap<string, KeyAccount>
  readonly keys?: ReadonlyArray<MemoryKey>
} = {}) => {
  const state: MemoryKeysState = {
    keys: new Map((seed.keys ?? []).map((key) => [key.id, { ...key }])),
    accounts: seed.accounts ?? new Map()
  }

  const repo: Repo = {
    findLiveKeyByHash: (hash) =>
      Effect.sync(() => {
        for (const key of state.keys.values()) {
          if (key.keyHash !== hash || key.revokedAt !== null) continue
          const account = state.accounts.get(key.accountId)
          // The inner join: a key whose account row is gone is not found.
          if (account === undefined) return Option.none()
          return Option.some({ key_id: key.id, account_id: key.accountId, plan: account.plan, suspended: account.suspended, scopes: [...key.scopes] })
        }
        return Option.none()
      }),
    insertKey: ({ accountId, id, keyHash, scopes }) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        // The primary key, the unique key_hash and the account's foreign key: violations are defects, as at the SQL boundary.
        if (state.keys.has(id)) return Effect.die(new Error(`duplicate api key id ${id}`))
        if ([...state.keys.values()].some((key) => key.keyHash === keyHash)) return Effect.die(new Error("duplicate api key hash"))
        if (!state.accounts.has(accountId)) return Effect.die(new Error(`api key for unknown account ${accountId}`))
        state.keys.set(id, { id, accountId, keyHash, scopes: [...scopes], createdAt: now, revokedAt: null })
        return Effect.succeed({ created_at: new Date(now) })
      }),
    revokeKey: (keyId) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const key = state.keys.get(keyId)
        if (key === undefined) return Option.none()
        // The first revocation's time stays.
        key.revokedAt ??= now
        return Option.some({ id: key.id })
      })
  }
  return { layer: Layer.succeed(KeysRepo, repo), state }
}
