/**
 * Every statement on `api_keys` (with the owning account's plan and state), named for what it
 * does. Keys are found by the SHA-256 hash of the plain key; the plain key never reaches the
 * database. Database and decoding failures are defects.
 */
import { Context, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"
import { Plan, Scope } from "./Domain.js"

/** A live key and what its account may do. */
export const KeyOwnerRow = Schema.Struct({
  key_id: Schema.String,
  account_id: Schema.String,
  plan: Plan,
  suspended: Schema.Boolean,
  scopes: Schema.Array(Scope)
})
export type KeyOwnerRow = typeof KeyOwnerRow.Type

export const NewKey = Schema.Struct({
  id: Schema.String,
  accountId: Schema.String,
  keyHash: Schema.String,
  scopes: Schema.Array(Scope)
})
export type NewKey = typeof NewKey.Type

/** The statements on `api_keys`, as Auth and the tests' in-memory twin offer them. */
export interface KeysRepoService {
  /** The unrevoked key with this hash, with its account's plan, suspension and the key's scopes. */
  readonly findLiveKeyByHash: (hash: string) => Effect.Effect<Option.Option<KeyOwnerRow>>
  readonly insertKey: (key: NewKey) => Effect.Effect<{ readonly created_at: Date }>
  /** Marks the key revoked (the first revocation's time stays); None when no such key exists. */
  readonly revokeKey: (keyId: string) => Effect.Effect<Option.Option<{ readonly id: string }>>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const findLiveKeyByHash = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: KeyOwnerRow,
    execute: (hash) =>
      sql`
        SELECT k.id AS key_id, k.account_id, a.plan, a.suspended, k.scopes
          FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.key_hash = ${hash} AND k.revoked_at IS NULL`
  })

  const insertKey = SqlSchema.findOne({
    Request: NewKey,
    Result: Schema.Struct({ created_at: Schema.Date }),
    execute: ({ accountId, id, keyHash, scopes }) =>
      sql`
        INSERT INTO api_keys (id, account_id, key_hash, scopes)
        VALUES (${id}, ${accountId}, ${keyHash}, string_to_array(${scopes.join(",")}, ','))
        RETURNING created_at`
  })

  const revokeKey = SqlSchema.findOneOption({
    Request: Schema.String,
    Result: Schema.Struct({ id: Schema.String }),
    execute: (keyId) => sql`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = ${keyId} RETURNING id`
  })

  return atRepoBoundary("KeysRepo", { findLiveKeyByHash, insertKey, revokeKey })
})

export class KeysRepo extends Context.Service<KeysRepo, KeysRepoService>()("hookline/KeysRepo") {
  static readonly layer = Layer.effect(KeysRepo, make)
}
