/**
 * IdempotencyRepo in memory: the same transitions as the PostgreSQL repository (Repo.ts) on a
 * Map of keys, with time from Effect's Clock (a TestClock in tests) where the SQL uses the
 * database's now(). For tests of the Idempotency service that need no database; the PostgreSQL
 * repository remains the proof of the SQL.
 *
 * What differs: times are whole milliseconds (PostgreSQL keeps microseconds), and a sweep deletes
 * every expired key at once (the SQL deletes them in batches of 1000, with the same total).
 */
import { Clock, Effect, Layer, Option } from "effect"
import { type ClaimRequest, type Completion, IdempotencyRepo, type KeyRow } from "./Repo.js"

/** One row of idempotency_keys; times in epoch milliseconds. */
export interface MemoryIdempotencyKey {
  readonly scope: string
  readonly key: string
  fingerprint: string
  method: string
  path: string
  status: "in_progress" | "completed"
  owner: string
  lockedAt: number
  requestId: string | null
  responseStatus: number | null
  responseHeaders: Record<string, string> | null
  /** The sealed answer body, as stored. */
  responseBody: string | null
  createdAt: number
  completedAt: number | null
  expiresAt: number
}

export interface MemoryIdempotencyState {
  /** By idempotencyKeyOf(scope, key): the table's primary key. */
  keys: Map<string, MemoryIdempotencyKey>
}

/** The state's key for (scope, key). */
export const idempotencyKeyOf = (scope: string, key: string) => JSON.stringify([scope, key])

type Repo = IdempotencyRepo["Service"]

/** A claim the lock timeout has passed: its owner stopped heart-beating. */
const stalled = (row: MemoryIdempotencyKey, now: number, lockSeconds: number) =>
  row.status === "in_progress" && row.lockedAt <= now - lockSeconds * 1000

/** The row of `owner`'s claim still in progress, if that is what the key holds. */
const ownClaim = (state: MemoryIdempotencyState, scope: string, key: string, owner: string) => {
  const row = state.keys.get(idempotencyKeyOf(scope, key))
  return row !== undefined && row.owner === owner && row.status === "in_progress" ? row : undefined
}

const toKeyRow = (row: MemoryIdempotencyKey): KeyRow => ({
  fingerprint: row.fingerprint,
  method: row.method,
  path: row.path,
  status: row.status,
  request_id: row.requestId,
  response_status: row.responseStatus,
  response_headers: row.responseHeaders === null ? null : { ...row.responseHeaders },
  response_body: row.responseBody
})

const statements = (state: MemoryIdempotencyState) => ({
  /**
   * Inserts the claim, or takes over a row that expired, or a stalled claim of the same
   * fingerprint; any other row refuses it (None), as the SQL's ON CONFLICT … WHERE does.
   */
  claimKey: (claim: ClaimRequest) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const id = idempotencyKeyOf(claim.scope, claim.key)
      const existing = state.keys.get(id)
      if (
        existing !== undefined &&
        !(existing.expiresAt <= now || (stalled(existing, now, claim.lockSeconds) && existing.fingerprint === claim.fingerprint))
      ) {
        return Option.none()
      }
      state.keys.set(id, {
        scope: claim.scope,
        key: claim.key,
        fingerprint: claim.fingerprint,
        method: claim.method,
        path: claim.path,
        status: "in_progress",
        owner: claim.owner,
        lockedAt: now,
        requestId: claim.requestId,
        responseStatus: null,
        responseHeaders: null,
        responseBody: null,
        createdAt: now,
        completedAt: null,
        expiresAt: now + claim.ttlSeconds * 1000
      })
      return Option.some({ owner: claim.owner })
    }),

  findLiveKey: (scope: string, key: string) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const row = state.keys.get(idempotencyKeyOf(scope, key))
      return row !== undefined && row.expiresAt > now ? Option.some(toKeyRow(row)) : Option.none()
    }),

  touchClaim: (scope: string, key: string, owner: string) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const row = ownClaim(state, scope, key, owner)
      if (row !== undefined) row.lockedAt = now
    }),

  /** None when the claim is not `owner`'s in progress any more (taken over, or already completed). */
  completeKey: (done: Completion) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const row = ownClaim(state, done.scope, done.key, done.owner)
      if (row === undefined) return Option.none()
      row.status = "completed"
      row.completedAt = now
      row.responseStatus = done.status
      row.responseHeaders = { ...done.headers }
      row.responseBody = done.sealedBody
      return Option.some({ key: done.key })
    }),

  releaseKey: (scope: string, key: string, owner: string) =>
    Effect.sync(() => ownClaim(state, scope, key, owner) !== undefined && state.keys.delete(idempotencyKeyOf(scope, key))),

  /** Deletes expired keys that are completed, or claims stalled past `lockSeconds`; how many. */
  sweepExpired: (lockSeconds: number) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      let deleted = 0
      for (const [id, row] of state.keys) {
        if (row.expiresAt <= now && (row.status === "completed" || row.lockedAt <= now - lockSeconds * 1000)) {
          state.keys.delete(id)
          deleted++
        }
      }
      return deleted
    })
})

/** A fresh in-memory key store, optionally seeded with rows: its layer, and its state for a test to read. */
export const makeIdempotencyRepoInMemory = (seed: ReadonlyArray<MemoryIdempotencyKey> = []) => {
  const state: MemoryIdempotencyState = {
    keys: new Map(seed.map((row) => [idempotencyKeyOf(row.scope, row.key), { ...row }]))
  }
  const repo: Repo = statements(state)
  return { layer: Layer.succeed(IdempotencyRepo, repo), state }
}
