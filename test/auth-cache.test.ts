/**
 * The API-key lookup cache (src/Auth/Auth.ts) alone on a real, migrated PostgreSQL database, its
 * time driven by TestClock: a lookup is answered from the cache for AUTH_CACHE_TTL (500 ms by
 * default), so a revocation, a suspension or a plan change shows on the first lookup once that
 * much time has passed, and not a millisecond before. Nothing sleeps.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Exit, Layer, ManagedRuntime, Option, References } from "effect"
import { TestClock } from "effect/testing"
import { randomBytes } from "node:crypto"
import type Pg from "pg"
import { Auth, type KeyOwner } from "../src/Auth/Auth.js"
import { KeysRepo } from "../src/Auth/Repo.js"
import { makeKeysRepoInMemory } from "../src/Auth/RepoMemory.js"
import { newId } from "../src/Ids.js"
import { SqlLive } from "../src/Sql.js"
import { createDatabase, dropDatabase, testPool } from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

/** The default AUTH_CACHE_TTL, which the service below runs with. */
const ttlMs = 500

const authOn = (databaseUrl: string) =>
  ManagedRuntime.make(Auth.layer.pipe(
    Layer.provide(SqlLive),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, "Error")),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({
      env: { DATABASE_URL: databaseUrl, DATA_DIR: tempDir("hookline-auth-") }
    })))
  ))

let databaseUrl: string
let runtime: ReturnType<typeof authOn>
let db: Pg.Pool

beforeAll(async () => {
  databaseUrl = await createDatabase()
  runtime = authOn(databaseUrl)
  await runtime.runPromise(Effect.void)
  db = testPool(databaseUrl, 2)
})
afterAll(async () => {
  await runtime.dispose()
  await db.end()
  await dropDatabase(databaseUrl)
})

/** Runs `program` with TestClock as the Clock, starting from the wall clock's time. */
const run = <A, E>(program: Effect.Effect<A, E, Auth>) =>
  runtime.runPromise(Effect.andThen(TestClock.setTime(Date.now()), program).pipe(Effect.provide(TestClock.layer())))

/** A pro account with one key; returns the account id, the plain key and the key's id. */
const accountWithKey = async () => {
  const accountId = newId("acct")
  await db.query("INSERT INTO accounts (id, plan) VALUES ($1, 'pro')", [accountId])
  const created = await run(Effect.flatMap(Auth, (auth) => auth.createKey(accountId, undefined)))
  return { accountId, key: created.api_key, keyId: created.id }
}

/**
 * Looks the key up, applies `change` to the database, then looks it up again right away, one
 * millisecond before the TTL ends, and at its end: what each lookup answered.
 */
const lookupsAround = (key: string, change: () => Promise<unknown>) =>
  run(Effect.gen(function*() {
    const auth = yield* Auth
    const before = yield* auth.findKey(key)
    yield* Effect.promise(change)
    const atOnce = yield* auth.findKey(key)
    yield* TestClock.adjust(ttlMs - 1)
    const lastCachedMoment = yield* auth.findKey(key)
    yield* TestClock.adjust(1)
    const afterTtl = yield* auth.findKey(key)
    return { before, atOnce, lastCachedMoment, afterTtl }
  }))

const ownerOf = (found: Option.Option<KeyOwner>) => Option.getOrThrow(found)

describe("the API-key cache, on TestClock", () => {
  test("a revoked key is answered from the cache until AUTH_CACHE_TTL has passed, then is unknown", async () => {
    const { accountId, key, keyId } = await accountWithKey()
    const seen = await lookupsAround(key, () => run(Effect.flatMap(Auth, (auth) => auth.revokeKey(keyId))))
    expect(ownerOf(seen.before)).toMatchObject({ keyId, accountId, plan: "pro", suspended: false })
    expect(seen.atOnce).toEqual(seen.before)
    expect(seen.lastCachedMoment).toEqual(seen.before)
    expect(seen.afterTtl).toEqual(Option.none())
  })

  test("a suspension and a plan change show once AUTH_CACHE_TTL has passed", async () => {
    const { accountId, key } = await accountWithKey()
    const seen = await lookupsAround(key, () =>
      db.query("UPDATE accounts SET suspended = true, plan = 'free' WHERE id = $1", [accountId]))
    expect(ownerOf(seen.before)).toMatchObject({ plan: "pro", suspended: false })
    expect(seen.lastCachedMoment).toEqual(seen.before)
    expect(ownerOf(seen.afterTtl)).toMatchObject({ accountId, plan: "free", suspended: true })
  })

  test("an unknown key is remembered as unknown for the TTL too, then looked up again", async () => {
    const { accountId } = await accountWithKey()
    const plain = `hkl_live_${randomBytes(24).toString("base64url")}`
    const seen = await lookupsAround(plain, () =>
      db.query(
        "INSERT INTO api_keys (id, account_id, key_hash, scopes) VALUES ($1, $2, $3, ARRAY['hooks:read'])",
        [newId("key"), accountId, new Bun.CryptoHasher("sha256").update(plain).digest("hex")]
      ))
    expect(seen.before).toEqual(Option.none())
    expect(seen.lastCachedMoment).toEqual(Option.none())
    expect(ownerOf(seen.afterTtl)).toMatchObject({ accountId, scopes: ["hooks:read"] })
  })
})

describe("the API-key cache, when a lookup fails", () => {
  test("a lookup that dies is not remembered: the next request asks again and finds the key", async () => {
    const accounts = new Map([["acct_cache", { plan: "pro" as const, suspended: false }]])
    const memory = makeKeysRepoInMemory({ accounts })
    let failuresLeft = 1
    const flaky = Layer.effect(
      KeysRepo,
      Effect.gen(function*() {
        const repo = yield* KeysRepo
        return KeysRepo.of({
          ...repo,
          findLiveKeyByHash: (hash) => (failuresLeft-- > 0 ? Effect.die(new Error("the database went away")) : repo.findLiveKeyByHash(hash))
        })
      })
    ).pipe(Layer.provide(memory.layer))
    const found = await Effect.runPromise(Effect.gen(function*() {
      const auth = yield* Auth
      const created = yield* auth.createKey("acct_cache", undefined)
      const first = yield* Effect.exit(auth.findKey(created.api_key))
      const second = yield* auth.findKey(created.api_key)
      return { first, second, keyId: created.id }
    }).pipe(Effect.provide(Auth.layerWithoutDependencies.pipe(Layer.provide(flaky))), Effect.provide(TestClock.layer())))
    expect(Exit.isFailure(found.first)).toBe(true)
    expect(ownerOf(found.second)).toMatchObject({ keyId: found.keyId, accountId: "acct_cache" })
  })
})
