/**
 * The catalog's and the idempotency keys' repositories in memory (src/Hooks/RepoMemory.ts,
 * src/Idempotency/RepoMemory.ts), and the services over them.
 *
 * - The contract suites run the same cases against the PostgreSQL repositories (a fresh migrated
 *   database) and the memory ones: found rows, refusals, ordering and paging where both define the
 *   same order (list pages, the substring fallback, one-word search), import staging, and every
 *   transition of an idempotency key. Expiry and stalled claims use ttl 0 and lock 0 there, so
 *   they hold on the database's clock and the real one alike.
 * - The service tests run HookCatalog and Idempotency over the memory layers with TestClock and
 *   no database: what a search or list answers and charges, the first-page cache, and a key's
 *   claim, replay, expiry, takeover and sweep.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { type Config, ConfigProvider, Duration, Effect, Exit, Layer, ManagedRuntime, Option, References } from "effect"
import { HttpServerRequest } from "effect/http"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { randomBytes } from "node:crypto"
import { CurrentCaller } from "../src/Auth/Api.js"
import { topSortMs } from "../src/Hooks/CatalogSql.js"
import { HookCatalog } from "../src/Hooks/HookCatalog.js"
import type { HookRecord } from "../src/Hooks/HookRecord.js"
import { CatalogRepo, type SearchPageRequest } from "../src/Hooks/Repo.js"
import { type CatalogSeed, makeCatalogRepoInMemory, type MemoryCatalogState } from "../src/Hooks/RepoMemory.js"
import { type Claim, Idempotency, IdempotencyConfig, type KeyRequest, type StoredAnswer } from "../src/Idempotency/Idempotency.js"
import { IdempotencyRepo } from "../src/Idempotency/Repo.js"
import { idempotencyKeyOf, makeIdempotencyRepoInMemory, type MemoryIdempotencyState } from "../src/Idempotency/RepoMemory.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { makeLedgerRepoInMemory } from "../src/Ledger/RepoMemory.js"
import { SqlLive } from "../src/Sql.js"
import { hookRecord } from "./support/hookRecord.js"
import { createDatabase, dropDatabase } from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

const hex = (bytes: number) => randomBytes(bytes).toString("hex")

/** Ids whose order is their number's: `hook_` + 24 random hex (unique per call of hookIds) + 8 hex of n. */
const hookIds = () => {
  const base = hex(12)
  return (n: number) => `hook_${base}${n.toString(16).padStart(8, "0")}`
}

const hook = (id: string, text: string, fields: Partial<HookRecord> = {}): HookRecord =>
  hookRecord(id, text, { media_type: "video", hook_duration_sec: 2.5, published_at: "2025-06-01T12:00:00.000Z", ...fields })

const success = <A, E>(exit: Exit.Exit<A, E>): A => {
  if (Exit.isFailure(exit)) throw new Error(`expected success, got ${String(exit.cause)}`)
  return exit.value
}

const expectDefect = <A, E>(exit: Exit.Exit<A, E>) => {
  expect(Exit.isFailure(exit)).toBe(true)
  if (Exit.isFailure(exit)) expect(exit.cause.reasons.some((reason) => reason._tag === "Die")).toBe(true)
}

// ---------------------------------------------------------------------------------------------
// Contract: the same cases on PostgreSQL and in memory
// ---------------------------------------------------------------------------------------------

type Repos = CatalogRepo | IdempotencyRepo

interface Backend {
  readonly name: string
  readonly start: () => Promise<void>
  readonly stop: () => Promise<void>
  readonly exit: <A, E>(effect: Effect.Effect<A, E, Repos>) => Promise<Exit.Exit<A, unknown>>
  /** In one transaction: PostgreSQL drops the import's staging table when it ends. */
  readonly exitInTransaction: <A, E>(effect: Effect.Effect<A, E, Repos>) => Promise<Exit.Exit<A, unknown>>
}

const postgresLayer = (databaseUrl: string): Layer.Layer<Repos | SqlClient.SqlClient, unknown> => {
  const provider = ConfigProvider.fromEnv({
    env: { DATABASE_URL: databaseUrl, DATA_DIR: tempDir("hookline-memory-repos-") }
  })
  return Layer.mergeAll(CatalogRepo.layer, IdempotencyRepo.layer).pipe(
    Layer.provideMerge(SqlLive),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
    Layer.provide(ConfigProvider.layer(provider))
  )
}

const postgresBackend = (): Backend => {
  let databaseUrl: string | undefined
  let runtime: ManagedRuntime.ManagedRuntime<Repos | SqlClient.SqlClient, unknown> | undefined
  const started = () => {
    if (runtime === undefined) throw new Error("the PostgreSQL backend is not started")
    return runtime
  }
  return {
    name: "PostgreSQL",
    start: async () => {
      databaseUrl = await createDatabase()
      runtime = ManagedRuntime.make(postgresLayer(databaseUrl))
      await runtime.runPromise(Effect.void)
    },
    stop: async () => {
      await runtime?.dispose()
      if (databaseUrl !== undefined) await dropDatabase(databaseUrl)
    },
    exit: (effect) => started().runPromiseExit(effect),
    exitInTransaction: (effect) => started().runPromiseExit(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(effect)))
  }
}

const memoryBackend = (): Backend => {
  let runtime: ManagedRuntime.ManagedRuntime<Repos, never> | undefined
  const started = () => {
    if (runtime === undefined) throw new Error("the memory backend is not started")
    return runtime
  }
  return {
    name: "memory",
    start: async () => {
      runtime = ManagedRuntime.make(Layer.mergeAll(makeCatalogRepoInMemory().layer, makeIdempotencyRepoInMemory().layer))
    },
    stop: async () => {
      await runtime?.dispose()
    },
    exit: (effect) => started().runPromiseExit(effect),
    // The memory staging does not depend on a transaction (it lives until the next createImportStaging).
    exitInTransaction: (effect) => started().runPromiseExit(effect)
  }
}

const withCatalog = <A, E>(body: (repo: CatalogRepo["Service"]) => Effect.Effect<A, E>) => Effect.flatMap(CatalogRepo, body)
const withKeys = <A, E>(body: (repo: IdempotencyRepo["Service"]) => Effect.Effect<A, E>) => Effect.flatMap(IdempotencyRepo, body)

/** Eight random symbols: no letter or digit, so neither backend finds a word to search for in them. */
const symbolsToken = () => [...randomBytes(8)].map((byte) => "#%&*=^!?$~"[byte % 10]).join("")

const firstSearchPosition = [null, null, null] as const
const searchRequest = (query: string, rows: number, after: SearchPageRequest["after"] = firstSearchPosition): SearchPageRequest => ({
  query,
  after,
  rows,
  walkWindow: 10_000
})

/** A claim of `key` in `scope`: an hour to live and 30 s of lock unless told. */
const claimOf = (scope: string, key: string, fields: { owner: string; fingerprint?: string; ttlSeconds?: number; lockSeconds?: number }) => ({
  scope,
  key,
  owner: fields.owner,
  fingerprint: fields.fingerprint ?? "fp-1",
  method: "POST",
  path: "/v1/things",
  requestId: `req_${fields.owner}`,
  ttlSeconds: fields.ttlSeconds ?? 3600,
  lockSeconds: fields.lockSeconds ?? 30
})

const completionOf = (scope: string, key: string, owner: string) => ({
  scope,
  key,
  owner,
  status: 201,
  headers: { "content-type": "application/json", "x-credits-charged": "1" },
  sealedBody: "sealed-body"
})

for (const backend of [postgresBackend(), memoryBackend()]) describe(`contract on ${backend.name}`, () => {
  beforeAll(backend.start, 60_000)
  afterAll(backend.stop, 30_000)
  const run = async <A, E>(effect: Effect.Effect<A, E, Repos>) => success(await backend.exit(effect))

  describe("CatalogRepo", () => {

    test("categories: a replacement keeps the last name of a slug, listed by name then slug; a merge adds and renames", async () => {
      await run(withCatalog((repo) =>
        repo.replaceCategories([
          { slug: "b-slug", name: "beta" },
          { slug: "d-slug", name: "beta" },
          { slug: "c-slug", name: "alpha" },
          { slug: "a-slug", name: "beta" },
          { slug: "b-slug", name: "bravo" }
        ])
      ))
      expect(await run(withCatalog((repo) => repo.categories))).toEqual([
        { slug: "c-slug", name: "alpha" },
        { slug: "a-slug", name: "beta" },
        { slug: "d-slug", name: "beta" },
        { slug: "b-slug", name: "bravo" }
      ])
      await run(withCatalog((repo) => repo.mergeCategories([{ slug: "a-slug", name: "able" }, { slug: "e-slug", name: "echo" }])))
      expect((await run(withCatalog((repo) => repo.categories))).map((category) => category.slug)).toEqual(["a-slug", "c-slug", "d-slug", "b-slug", "e-slug"])
      // One statement may not touch a slug twice: refused whole, nothing changed.
      expectDefect(await backend.exit(withCatalog((repo) => repo.mergeCategories([{ slug: "f-slug", name: "x" }, { slug: "f-slug", name: "y" }]))))
      const exists = await run(withCatalog((repo) =>
        Effect.all([repo.categoryExists("e-slug"), repo.categoryExists("E-SLUG"), repo.categoryExists("f-slug"), repo.categoryExists("missing")])
      ))
      expect(exists).toEqual([true, false, false, false])
    })

    test("a hook is found by its exact id with every field as written; an upsert counts new and updated rows", async () => {
      const id = hookIds()
      const rich = hook(id(1), "Stop scrolling: this changes everything", {
        thumbnail_url: "https://example.com/t.jpg",
        category: "fitness",
        published_at: "2025-06-01T12:34:56.789Z",
        source_url: "https://example.com/v/1",
        caption: "caption",
        duration_sec: 31.5,
        summary: "summary",
        emotions: { inspiration: 10, fear: 0, curiosity: 90, satisfaction: 5, happiness: 50, anger: 0, surprise: 70 },
        comment_themes: [{ word: "wow", count: 3 }],
        metrics: { views: 1200, nested: { list: [1, null, "x"] } },
        creator: { handle: "@someone" },
        audio: null
      })
      expect(await run(withCatalog((repo) => repo.upsertHooks([rich])))).toEqual({ inserted: 1, updated: 0 })
      const found = Option.getOrThrow(await run(withCatalog((repo) => repo.findHook(rich.id))))
      expect(found).toEqual({ ...rich, published_at: new Date("2025-06-01T12:34:56.789Z") })

      const renamed = { ...rich, text: "Renamed", metrics: null }
      expect(await run(withCatalog((repo) => repo.upsertHooks([renamed, hook(id(2), "second")])))).toEqual({ inserted: 1, updated: 1 })
      expect(Option.getOrThrow(await run(withCatalog((repo) => repo.findHook(rich.id))))).toMatchObject({ text: "Renamed", metrics: null })
      expect(Option.isNone(await run(withCatalog((repo) => repo.findHook(rich.id.toUpperCase()))))).toBe(true)
      expect(await run(withCatalog((repo) => repo.upsertHooks([])))).toEqual({ inserted: 0, updated: 0 })

      // A batch repeating an id is refused whole.
      expectDefect(await backend.exit(withCatalog((repo) => repo.upsertHooks([hook(id(3), "a"), hook(id(3), "b")]))))
      expect(Option.isNone(await run(withCatalog((repo) => repo.findHook(id(3)))))).toBe(true)
    })

    test("the catalog version moves on with every write to the hooks, and only then", async () => {
      const id = hookIds()
      const before = await run(withCatalog((repo) => repo.catalogVersion))
      await run(withCatalog((repo) => Effect.all([repo.categories, repo.findHook(id(1)), repo.upsertHooks([]), repo.replaceCategories([])])))
      expect(await run(withCatalog((repo) => repo.catalogVersion))).toBe(before)
      await run(withCatalog((repo) => repo.upsertHooks([hook(id(1), "versioned")])))
      const after = await run(withCatalog((repo) => repo.catalogVersion))
      expect(after).toBeGreaterThan(before)
      await run(withCatalog((repo) => repo.upsertHooks([hook(id(1), "versioned again")])))
      expect(await run(withCatalog((repo) => repo.catalogVersion))).toBeGreaterThan(after)
    })

    test("list pages: a category's hooks by (sort_ms, id) descending, undated last, each page strictly after the last row", async () => {
      const id = hookIds()
      const category = `c${hex(6)}`
      const dates: Record<number, string | null> = {
        1: "2025-06-03T00:00:00.000Z",
        2: "2025-06-02T00:00:00.000Z",
        3: "2025-06-02T00:00:00.000Z",
        4: null,
        5: "2025-06-04T00:00:00.123Z"
      }
      await run(withCatalog((repo) =>
        repo.upsertHooks([
          ...Object.entries(dates).map(([n, published_at]) => hook(id(Number(n)), `hook ${n}`, { category, published_at })),
          hook(id(6), "another category", { category: `${category}x`, published_at: "2026-01-01T00:00:00.000Z" })
        ])
      ))
      const first = await run(withCatalog((repo) => repo.listPage({ category, after: [topSortMs, ""], rows: 3 })))
      expect(first.map((row) => row.id)).toEqual([id(5), id(1), id(3)])
      expect(first.map((row) => row.k2)).toEqual([Date.parse(dates[5] ?? ""), Date.parse(dates[1] ?? ""), Date.parse(dates[3] ?? "")])
      expect(first[0]).toMatchObject({ text: "hook 5", category, platform: "tiktok", published_at: new Date(dates[5] ?? "") })
      const last = first[first.length - 1]
      const second = await run(withCatalog((repo) => repo.listPage({ category, after: [last.k2, last.id], rows: 3 })))
      expect(second.map((row) => row.id)).toEqual([id(2), id(4)])
      expect(second[1]).toMatchObject({ k2: -topSortMs, published_at: null })
      const end = second[1]
      expect(await run(withCatalog((repo) => repo.listPage({ category, after: [end.k2, end.id], rows: 3 })))).toEqual([])
      expect(await run(withCatalog((repo) => repo.listPage({ category: `${category}-none`, after: [topSortMs, ""], rows: 3 })))).toEqual([])
    })

    test("a search with no word to search for pages through substring matches: (sort_ms, id) descending, k1 null", async () => {
      const id = hookIds()
      const token = symbolsToken()
      await run(withCatalog((repo) =>
        repo.upsertHooks([
          hook(id(1), `Before${token}after`, { published_at: "2025-01-01T00:00:00.000Z" }),
          hook(id(2), `${token}suffix`, { published_at: "2025-01-03T00:00:00.000Z" }),
          hook(id(3), "nothing here", { published_at: "2025-01-04T00:00:00.000Z" }),
          hook(id(4), `a${token}`, { published_at: null }),
          hook(id(5), token, { published_at: "2025-01-03T00:00:00.000Z" }),
          hook(id(6), `Note ${token} here`, { published_at: "2025-01-05T00:00:00.000Z" }),
          hook(id(7), token.slice(1), { published_at: "2025-01-06T00:00:00.000Z" })
        ])
      ))
      const first = await run(withCatalog((repo) => repo.searchPage(searchRequest(token, 4))))
      expect(first.map((row) => [row.id, row.k1])).toEqual([[id(6), null], [id(5), null], [id(2), null], [id(1), null]])
      const last = first[3]
      const second = await run(withCatalog((repo) => repo.searchPage(searchRequest(token, 4, [null, last.k2, last.id]))))
      expect(second.map((row) => [row.id, row.k2])).toEqual([[id(4), -topSortMs]])
      expect(await run(withCatalog((repo) => repo.searchPage(searchRequest(`${token}${token}`, 3))))).toEqual([])
    })

    test("one-word search: most occurrences first, then newest; each page continues below the last row's (k1, sort_ms, id)", async () => {
      const id = hookIds()
      const word = `w${hex(5)}`
      await run(withCatalog((repo) =>
        repo.upsertHooks([
          hook(id(1), `${word} ${word} ${word} x`, { published_at: "2025-02-01T00:00:00.000Z" }),
          hook(id(2), `${word} and ${word}`, { published_at: "2025-02-01T00:00:00.000Z" }),
          hook(id(3), `The ${word.toUpperCase()}`, { published_at: "2025-02-03T00:00:00.000Z" }),
          hook(id(4), word, { published_at: "2025-02-02T00:00:00.000Z" }),
          hook(id(5), "unrelated words", { published_at: "2025-02-04T00:00:00.000Z" })
        ])
      ))
      const first = await run(withCatalog((repo) => repo.searchPage(searchRequest(word, 2))))
      expect(first.map((row) => [row.id, row.k1])).toEqual([[id(1), 3], [id(2), 2]])
      const afterFirst = first[1]
      const second = await run(withCatalog((repo) => repo.searchPage(searchRequest(word, 2, [afterFirst.k1, afterFirst.k2, afterFirst.id]))))
      expect(second.map((row) => [row.id, row.k1, row.k2])).toEqual([
        [id(3), 1, Date.parse("2025-02-03T00:00:00.000Z")],
        [id(4), 1, Date.parse("2025-02-02T00:00:00.000Z")]
      ])
      const afterSecond = second[1]
      expect(await run(withCatalog((repo) => repo.searchPage(searchRequest(word, 2, [afterSecond.k1, afterSecond.k2, afterSecond.id]))))).toEqual([])
    })

    test("import staging: the last staged record of an id wins, new ids are counted; staging needs its table", async () => {
      const id = hookIds()
      expectDefect(await backend.exitInTransaction(withCatalog((repo) => repo.stageHooks([hook(id(9), "no table")], 0))))
      await run(withCatalog((repo) => repo.upsertHooks([hook(id(4), "before the import")])))
      const staged = success(await backend.exitInTransaction(withCatalog((repo) =>
        Effect.gen(function*() {
          yield* repo.createImportStaging()
          yield* repo.stageHooks([hook(id(2), "b1"), hook(id(1), "a1"), hook(id(1), "a2")], 0)
          yield* repo.stageHooks([hook(id(3), "c1"), hook(id(4), "d2"), hook(id(2), "b2")], 3)
          return yield* repo.upsertStagedHooks()
        })
      )))
      expect(staged).toBe(3)
      const texts = await run(withCatalog((repo) =>
        Effect.forEach([1, 2, 3, 4], (n) => Effect.map(repo.findHook(id(n)), Option.map((row) => row.text)))
      ))
      expect(texts.map(Option.getOrNull)).toEqual(["a2", "b2", "c1", "d2"])
    })
  })

  describe("IdempotencyRepo", () => {

    test("a claim inserts the key in progress; while it is live and heart-beaten nobody else claims it", async () => {
      const scope = `acct_${hex(6)}`
      expect(Option.getOrThrow(await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "first" })))))).toEqual({ owner: "first" })
      const again = await run(withKeys((repo) =>
        Effect.all([
          repo.claimKey(claimOf(scope, "k", { owner: "second" })),
          repo.claimKey(claimOf(scope, "k", { owner: "third", fingerprint: "fp-other", lockSeconds: 0 }))
        ])
      ))
      expect(again.every(Option.isNone)).toBe(true)
      expect(Option.getOrThrow(await run(withKeys((repo) => repo.findLiveKey(scope, "k"))))).toEqual({
        fingerprint: "fp-1",
        method: "POST",
        path: "/v1/things",
        status: "in_progress",
        request_id: "req_first",
        response_status: null,
        response_headers: null,
        response_body: null
      })
      // Keys are per scope.
      expect(Option.isSome(await run(withKeys((repo) => repo.claimKey(claimOf(`${scope}-other`, "k", { owner: "elsewhere" })))))).toBe(true)
      expect(Option.isNone(await run(withKeys((repo) => repo.findLiveKey(scope, "unknown"))))).toBe(true)
    })

    test("only the owner completes its claim, once; the answer is stored as given", async () => {
      const scope = `acct_${hex(6)}`
      await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "owner" }))))
      expect(Option.isNone(await run(withKeys((repo) => repo.completeKey(completionOf(scope, "k", "stranger")))))).toBe(true)
      expect(Option.getOrThrow(await run(withKeys((repo) => repo.completeKey(completionOf(scope, "k", "owner")))))).toEqual({ key: "k" })
      expect(Option.isNone(await run(withKeys((repo) => repo.completeKey(completionOf(scope, "k", "owner")))))).toBe(true)
      // A completed key is neither released (the release says so) nor taken over by its owner's late calls.
      const [released] = await run(withKeys((repo) => Effect.all([repo.releaseKey(scope, "k", "owner"), repo.touchClaim(scope, "k", "owner")])))
      expect(released).toBe(false)
      expect(Option.isNone(await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "late", lockSeconds: 0 })))))).toBe(true)
      expect(Option.getOrThrow(await run(withKeys((repo) => repo.findLiveKey(scope, "k"))))).toEqual({
        fingerprint: "fp-1",
        method: "POST",
        path: "/v1/things",
        status: "completed",
        request_id: "req_owner",
        response_status: 201,
        response_headers: { "content-type": "application/json", "x-credits-charged": "1" },
        response_body: "sealed-body"
      })
    })

    test("a stalled claim is taken over by the same request only; the old owner's answer is then refused", async () => {
      const scope = `acct_${hex(6)}`
      await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "stalled" }))))
      expect(Option.isNone(await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "other", fingerprint: "fp-2", lockSeconds: 0 })))))).toBe(true)
      expect(Option.getOrThrow(await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "retry", lockSeconds: 0 })))))).toEqual({ owner: "retry" })
      expect(Option.isNone(await run(withKeys((repo) => repo.completeKey(completionOf(scope, "k", "stalled")))))).toBe(true)
      expect(Option.isSome(await run(withKeys((repo) => repo.completeKey(completionOf(scope, "k", "retry")))))).toBe(true)
    })

    test("a heartbeat keeps the claim from being taken over; a stranger's heartbeat does not", async () => {
      const scope = `acct_${hex(6)}`
      await run(withKeys((repo) =>
        Effect.all([
          repo.claimKey(claimOf(scope, "kept", { owner: "a" })),
          repo.claimKey(claimOf(scope, "lost", { owner: "b" })),
          repo.claimKey(claimOf(scope, "probe", { owner: "c" }))
        ])
      ))
      // Real time, as the database's now() is: wait until a claim made with these two has gone
      // silent past a lock timeout of 1 s (a retry of the probe takes it over), not for a guessed delay.
      const probeTakenOver = () => run(withKeys((repo) => repo.claimKey(claimOf(scope, "probe", { owner: "retry-c", lockSeconds: 1 })))).then(Option.isSome)
      while (!(await probeTakenOver())) await Bun.sleep(50)
      await run(withKeys((repo) => Effect.all([repo.touchClaim(scope, "kept", "a"), repo.touchClaim(scope, "lost", "stranger")])))
      const takeovers = await run(withKeys((repo) =>
        Effect.all([
          repo.claimKey(claimOf(scope, "kept", { owner: "retry-a", lockSeconds: 1 })),
          repo.claimKey(claimOf(scope, "lost", { owner: "retry-b", lockSeconds: 1 }))
        ])
      ))
      expect(takeovers.map(Option.isSome)).toEqual([false, true])
    })

    test("an expired key is absent and anyone's to claim", async () => {
      const scope = `acct_${hex(6)}`
      await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "short", ttlSeconds: 0 }))))
      expect(Option.isNone(await run(withKeys((repo) => repo.findLiveKey(scope, "k"))))).toBe(true)
      expect(Option.isSome(await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "new", fingerprint: "fp-2" })))))).toBe(true)
      expect(Option.getOrThrow(await run(withKeys((repo) => repo.findLiveKey(scope, "k"))))).toMatchObject({ fingerprint: "fp-2", status: "in_progress" })
    })

    test("a release deletes the owner's claim only, and says whether it did", async () => {
      const scope = `acct_${hex(6)}`
      await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "owner" }))))
      expect(await run(withKeys((repo) => repo.releaseKey(scope, "k", "stranger")))).toBe(false)
      expect(Option.isSome(await run(withKeys((repo) => repo.findLiveKey(scope, "k"))))).toBe(true)
      expect(await run(withKeys((repo) => repo.releaseKey(scope, "k", "owner")))).toBe(true)
      expect(Option.isNone(await run(withKeys((repo) => repo.findLiveKey(scope, "k"))))).toBe(true)
      expect(Option.isSome(await run(withKeys((repo) => repo.claimKey(claimOf(scope, "k", { owner: "retry", fingerprint: "fp-2" })))))).toBe(true)
    })

    test("the sweep deletes expired answers, and expired claims once their lock has timed out; live keys stay", async () => {
      const scope = `acct_${hex(6)}`
      // Earlier tests' expired keys go first, so the counts below are this test's.
      await run(withKeys((repo) => repo.sweepExpired(0)))
      await run(withKeys((repo) =>
        Effect.all([
          repo.claimKey(claimOf(scope, "expired-claim", { owner: "a", ttlSeconds: 0 })),
          repo.claimKey(claimOf(scope, "expired-answer", { owner: "b", ttlSeconds: 0 })),
          repo.claimKey(claimOf(scope, "live-answer", { owner: "c" }))
        ])
      ))
      await run(withKeys((repo) => Effect.all([repo.completeKey(completionOf(scope, "expired-answer", "b")), repo.completeKey(completionOf(scope, "live-answer", "c"))])))
      expect(await run(withKeys((repo) => repo.sweepExpired(3600)))).toBe(1)
      // The expired claim was kept (its owner may still be running) until its lock timed out.
      expect(await run(withKeys((repo) => repo.sweepExpired(0)))).toBe(1)
      expect(await run(withKeys((repo) => repo.sweepExpired(0)))).toBe(0)
      expect(Option.isSome(await run(withKeys((repo) => repo.findLiveKey(scope, "live-answer"))))).toBe(true)
    })
  })
})

// ---------------------------------------------------------------------------------------------
// The services over the memory layers: no database, time from TestClock
// ---------------------------------------------------------------------------------------------

const start = Date.UTC(2026, 0, 15, 12)

/** The secrets and settings the services read, none from the developer's environment or DATA_DIR. */
const serviceConfig = () =>
  ConfigProvider.layer(ConfigProvider.fromEnv({
    env: {
      CURSOR_SECRET: "cursor-secret-for-tests",
      WEBHOOK_SECRET_KEY: "webhook-secret-key-for-tests",
      ADMIN_TOKEN: "admin-token-for-tests",
      DATA_DIR: tempDir("hookline-memory-services-")
    }
  }))

const reader = { accountId: "acct_reader", keyId: "key_reader", plan: "pro" }
const openingTopup = 100

type CatalogRequirements = Ledger | CurrentCaller | HttpServerRequest.HttpServerRequest

/**
 * Runs `body` with HookCatalog over an in-memory catalog seeded with `seed`, and the Ledger over
 * an in-memory ledger where the reader's wallet holds `openingTopup` credits.
 */
const runCatalog = <A, E>(
  seed: CatalogSeed,
  body: (catalog: HookCatalog["Service"], state: MemoryCatalogState) => Effect.Effect<A, E, CatalogRequirements>
) => {
  const catalog = makeCatalogRepoInMemory(seed)
  const ledger = makeLedgerRepoInMemory()
  const program = Effect.gen(function*() {
    yield* TestClock.setTime(start)
    yield* (yield* Ledger).openWallet(reader.accountId, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: openingTopup })
    return yield* body(yield* HookCatalog, catalog.state)
  }).pipe(
    Effect.provideService(CurrentCaller, reader),
    Effect.provideService(HttpServerRequest.HttpServerRequest, HttpServerRequest.fromWeb(new Request("http://localhost/v1/hooks"))),
    Effect.provide(Layer.mergeAll(
      HookCatalog.layerWithoutDependencies.pipe(Layer.provide(catalog.layer)),
      Ledger.layerWithoutDependencies.pipe(Layer.provide(ledger.layer)),
      TestClock.layer(),
      Layer.succeed(References.MinimumLogLevel, "Error")
    ).pipe(Layer.provide(serviceConfig())))
  )
  return Effect.runPromise(Effect.exit(program)).then((exit) => ({ exit, catalog: catalog.state, ledger: ledger.state }))
}

const balanceOf = Effect.flatMap(Ledger, (ledger) => Effect.map(ledger.wallet(reader.accountId), (wallet) => wallet.monthly + wallet.topup))

describe("HookCatalog over the memory catalog", () => {
  test("a search matches words whatever their case and the query's spacing, newest first; a query without a word matches substrings", async () => {
    const id = hookIds()
    const seed = {
      hooks: [
        hook(id(1), "Morning routine that works", { published_at: "2025-06-02T00:00:00.000Z" }),
        hook(id(2), "my MORNING coffee", { published_at: "2025-06-03T00:00:00.000Z" }),
        hook(id(3), "evening walk", { published_at: "2025-06-04T00:00:00.000Z" }),
        hook(id(4), "🔥🔥 hot take", { published_at: "2025-06-01T00:00:00.000Z" })
      ]
    }
    const { exit } = await runCatalog(seed, (catalog) =>
      Effect.all({
        words: catalog.searchRequest({ q: "  Morning   " }),
        substring: catalog.searchRequest({ q: "🔥" }),
        nothing: catalog.searchRequest({ q: "breakfast" }),
        balance: balanceOf
      }))
    const { balance, nothing, substring, words } = success(exit)
    expect(words).toMatchObject({ object: "list", has_more: false, next_cursor: null })
    expect(words.data.map((row) => row.id)).toEqual([id(2), id(1)])
    expect(words.data[0].published_at).toBe("2025-06-03T00:00:00.000Z")
    expect(substring.data.map((row) => row.id)).toEqual([id(4)])
    expect(nothing.data).toEqual([])
    // One credit per started 25 rows: 1 + 1 + 0 (an empty page costs nothing).
    expect(balance).toBe(openingTopup - 2)
  })

  test("a search pages through every match once, 50 a page, by cursors bound to its query", async () => {
    const id = hookIds()
    const hooks = Array.from({ length: 120 }, (_, n) =>
      hook(id(n), `zebra crossing ${n}`, { published_at: new Date(Date.UTC(2025, 0, 1) + n * 60_000).toISOString() }))
    const { exit } = await runCatalog({ hooks }, (catalog) =>
      Effect.gen(function*() {
        const pages = [yield* catalog.searchRequest({ q: "zebra" })]
        while (pages[pages.length - 1].next_cursor !== null && pages.length < 10) {
          pages.push(yield* catalog.searchRequest({ q: "zebra", cursor: pages[pages.length - 1].next_cursor ?? undefined }))
        }
        const foreign = yield* Effect.flip(catalog.searchRequest({ q: "crossing", cursor: pages[0].next_cursor ?? undefined }))
        return { pages, foreign, balance: yield* balanceOf }
      }))
    const { balance, foreign, pages } = success(exit)
    expect(pages.map((page) => [page.data.length, page.has_more])).toEqual([[50, true], [50, true], [20, false]])
    expect(pages.flatMap((page) => page.data.map((row) => row.id))).toEqual(hooks.map((record) => record.id).reverse())
    expect(foreign._tag).toBe("InvalidCursor")
    // 2 + 2 + 1 for the pages; the refused cursor cost nothing.
    expect(balance).toBe(openingTopup - 5)
  })

  test("first pages are served from the cache while the catalog version is unchanged; a write shows at once", async () => {
    const id = hookIds()
    const { exit } = await runCatalog({ hooks: [hook(id(1), "tiger one")] }, (catalog, state) =>
      Effect.gen(function*() {
        const first = yield* catalog.search("tiger", Option.none())
        // Changed behind the service's back, the version unchanged: the cached page stands.
        state.hooks.delete(id(1))
        const cached = yield* catalog.search("tiger", Option.none())
        yield* catalog.upsert([hook(id(2), "tiger two")])
        const fresh = yield* catalog.search("tiger", Option.none())
        return [first, cached, fresh].map((page) => page.data.map((row) => row.id))
      }))
    expect(success(exit)).toEqual([[id(1)], [id(1)], [id(2)]])
  })

  test("a list answers a category's hooks newest first, undated last; an unknown category or a blank query is refused before any credit is taken", async () => {
    const id = hookIds()
    const seed = {
      categories: [{ slug: "fitness", name: "Fitness" }],
      hooks: [
        hook(id(1), "squat", { category: "fitness", published_at: "2025-01-01T00:00:00.000Z" }),
        hook(id(2), "plank", { category: "fitness", published_at: null }),
        hook(id(3), "lunge", { category: "fitness", published_at: "2025-03-01T00:00:00.000Z" }),
        hook(id(4), "pasta", { category: "cooking", published_at: "2025-04-01T00:00:00.000Z" })
      ]
    }
    const { exit, ledger } = await runCatalog(seed, (catalog) =>
      Effect.gen(function*() {
        const unknown = yield* Effect.flip(catalog.listRequest({ category: "cooking" }))
        const blank = yield* Effect.flip(catalog.searchRequest({ q: " \t " }))
        const untouched = yield* balanceOf
        const listed = yield* catalog.listRequest({ category: "fitness" })
        return { unknown, blank, untouched, listed, balance: yield* balanceOf }
      }))
    const { balance, blank, listed, unknown, untouched } = success(exit)
    expect([unknown._tag, blank._tag]).toEqual(["ValidationFailed", "ValidationFailed"])
    expect(untouched).toBe(openingTopup)
    expect(listed.data.map((row) => row.id)).toEqual([id(3), id(1), id(2)])
    expect(balance).toBe(openingTopup - 1)
    expect(ledger.holds.size).toBe(1)
  })

  test("a hook is charged once it is found; a malformed or unknown id is NotFound and costs nothing", async () => {
    const id = hookIds()
    const found = hook(id(1), "found", { emotions: { inspiration: 1, fear: 2, curiosity: 3, satisfaction: 4, happiness: 5, anger: 6, surprise: 7 } })
    const { exit, ledger } = await runCatalog({ hooks: [found] }, (catalog) =>
      Effect.gen(function*() {
        const malformed = yield* Effect.flip(catalog.hookRequest("hook_nope"))
        const unknown = yield* Effect.flip(catalog.hookRequest(id(2)))
        const untouched = yield* balanceOf
        const rich = yield* catalog.hookRequest(found.id)
        return { malformed, unknown, untouched, rich, balance: yield* balanceOf }
      }))
    const { balance, malformed, rich, unknown, untouched } = success(exit)
    expect([malformed._tag, unknown._tag]).toEqual(["NotFound", "NotFound"])
    expect(untouched).toBe(openingTopup)
    expect(rich).toEqual(found)
    expect(balance).toBe(openingTopup - 1)
    expect(ledger.journal.filter((row) => row.entryType === "reserve").map((row) => [row.amount, row.referenceId])).toEqual([[-1, found.id]])
  })
})

type IdempotencySettings = Config.Success<typeof IdempotencyConfig>

/**
 * Runs `body` with Idempotency over an in-memory key store, the clock at `start`, and the settings
 * the service read; answers its exit and the store's state.
 */
const runKeys = <A, E>(body: (store: Idempotency["Service"], state: MemoryIdempotencyState, settings: IdempotencySettings) => Effect.Effect<A, E>) => {
  const memory = makeIdempotencyRepoInMemory()
  const program = Effect.gen(function*() {
    yield* TestClock.setTime(start)
    return yield* body(yield* Idempotency, memory.state, yield* IdempotencyConfig)
  }).pipe(
    Effect.provide(Layer.mergeAll(
      Idempotency.layerWithoutDependencies.pipe(Layer.provide(memory.layer)),
      TestClock.layer(),
      Layer.succeed(References.MinimumLogLevel, "Error")
    ).pipe(Layer.provideMerge(serviceConfig())))
  )
  return Effect.runPromise(Effect.exit(program)).then((exit) => ({ exit, state: memory.state }))
}

const keyRequest = (fields: Partial<KeyRequest> = {}): KeyRequest => ({
  scope: "acct_a",
  key: "key-1",
  fingerprint: "fp-1",
  method: "POST",
  path: "/v1/things",
  requestId: "req_first",
  ...fields
})

const answer: StoredAnswer = {
  status: 201,
  contentType: "application/json",
  headers: { "x-credits-charged": "2" },
  body: "{\"secret\":\"shown once\"}",
  requestId: "req_first"
}

/** The owner of a claim the test expects to have been made. */
const ownerOf = (claim: Claim): string => {
  if (claim._tag !== "Claimed") throw new Error(`expected Claimed, got ${claim._tag}`)
  return claim.owner
}

const later = (millis: number) => TestClock.adjust(Duration.millis(millis))

describe("Idempotency over the memory key store", () => {
  test("the first request claims the key; a repeat waits while it runs; another request under the key is a mismatch", async () => {
    const { exit } = await runKeys((store) =>
      Effect.gen(function*() {
        const first = yield* store.claim(keyRequest())
        const repeat = yield* store.claim(keyRequest({ requestId: "req_repeat" }))
        const other = yield* store.claim(keyRequest({ fingerprint: "fp-2", method: "PUT", path: "/v1/other" }))
        return { first: first._tag, repeat, other }
      }))
    expect(success(exit)).toEqual({ first: "Claimed", repeat: { _tag: "InProgress" }, other: { _tag: "Mismatch", method: "POST", path: "/v1/things" } })
  })

  test("a completed answer is replayed as stored, with the first request's id; its body is sealed at rest", async () => {
    const { exit, state } = await runKeys((store) =>
      Effect.gen(function*() {
        const owner = ownerOf(yield* store.claim(keyRequest()))
        const completed = yield* store.complete("acct_a", "key-1", owner, answer)
        return { completed, replay: yield* store.claim(keyRequest({ requestId: "req_repeat" })) }
      }))
    expect(success(exit)).toEqual({ completed: true, replay: { _tag: "Completed", answer } })
    const stored = state.keys.get(idempotencyKeyOf("acct_a", "key-1"))
    expect(stored?.responseHeaders).toEqual({ "x-credits-charged": "2", "content-type": "application/json" })
    expect(stored?.responseBody).not.toContain("shown once")
  })

  test("an answer is replayed until IDEMPOTENCY_KEY_TTL has passed; then the key runs a new request", async () => {
    const { exit } = await runKeys((store, _state, settings) =>
      Effect.gen(function*() {
        const ttl = Duration.toMillis(settings.keyTtl)
        yield* store.complete("acct_a", "key-1", ownerOf(yield* store.claim(keyRequest())), answer)
        yield* later(ttl - 1)
        const before = yield* store.claim(keyRequest())
        yield* later(1)
        const after = yield* store.claim(keyRequest({ fingerprint: "fp-2" }))
        return [before._tag, after._tag]
      }))
    expect(success(exit)).toEqual(["Completed", "Claimed"])
  })

  test("a claim heart-beaten stays its owner's; one silent for the lock timeout is taken over by the same request, and its late answer refused", async () => {
    const { exit } = await runKeys((store, _state, settings) =>
      Effect.gen(function*() {
        const lock = Duration.toMillis(settings.lockTimeout)
        const first = ownerOf(yield* store.claim(keyRequest()))
        yield* later(lock - 1)
        yield* store.heartbeat("acct_a", "key-1", first)
        yield* later(lock - 1)
        const whileBeating = yield* store.claim(keyRequest())
        yield* later(1)
        const otherRequest = yield* store.claim(keyRequest({ fingerprint: "fp-2" }))
        const takeover = ownerOf(yield* store.claim(keyRequest({ requestId: "req_retry" })))
        const lateAnswer = yield* store.complete("acct_a", "key-1", first, answer)
        const retryAnswer = yield* store.complete("acct_a", "key-1", takeover, { ...answer, status: 200 })
        return { whileBeating: whileBeating._tag, otherRequest: otherRequest._tag, lateAnswer, retryAnswer, replay: yield* store.claim(keyRequest()) }
      }))
    expect(success(exit)).toEqual({
      whileBeating: "InProgress",
      otherRequest: "Mismatch",
      lateAnswer: false,
      retryAnswer: true,
      replay: { _tag: "Completed", answer: { ...answer, status: 200, requestId: "req_retry" } }
    })
  })

  test("a failed attempt releases the key so a retry runs again; another owner's release changes nothing", async () => {
    const { exit } = await runKeys((store) =>
      Effect.gen(function*() {
        const owner = ownerOf(yield* store.claim(keyRequest()))
        yield* store.release("acct_a", "key-1", "someone-else")
        const stillHeld = yield* store.claim(keyRequest())
        yield* store.release("acct_a", "key-1", owner)
        return [stillHeld._tag, (yield* store.claim(keyRequest()))._tag]
      }))
    expect(success(exit)).toEqual(["InProgress", "Claimed"])
  })

  test("the sweep deletes expired answers at once, an expired claim only once its lock has timed out, and no live key", async () => {
    const { exit, state } = await runKeys((store, keys, settings) =>
      Effect.gen(function*() {
        const ttl = Duration.toMillis(settings.keyTtl)
        const lock = Duration.toMillis(settings.lockTimeout)
        yield* store.complete("acct_a", "answered", ownerOf(yield* store.claim(keyRequest({ key: "answered" }))), answer)
        const running = ownerOf(yield* store.claim(keyRequest({ key: "running" })))
        yield* later(ttl - 5_000)
        yield* store.heartbeat("acct_a", "running", running)
        yield* store.claim(keyRequest({ key: "recent" }))
        yield* later(5_000)
        const atExpiry = yield* store.sweepExpired
        const keptWhileBeating = [...keys.keys.values()].map((row) => row.key).sort()
        yield* later(lock)
        return { atExpiry, keptWhileBeating, afterLock: yield* store.sweepExpired }
      }))
    expect(success(exit)).toEqual({ atExpiry: 1, keptWhileBeating: ["recent", "running"], afterLock: 1 })
    expect([...state.keys.values()].map((row) => row.key)).toEqual(["recent"])
  })

  test("a stored answer that does not open for its key is a defect, never replayed", async () => {
    const { exit } = await runKeys((store, state) =>
      Effect.gen(function*() {
        yield* store.complete("acct_a", "key-1", ownerOf(yield* store.claim(keyRequest())), answer)
        yield* store.complete("acct_a", "key-2", ownerOf(yield* store.claim(keyRequest({ key: "key-2" }))), { ...answer, body: "other" })
        const one = state.keys.get(idempotencyKeyOf("acct_a", "key-1"))
        const two = state.keys.get(idempotencyKeyOf("acct_a", "key-2"))
        // A body sealed for another key, copied over: its binding does not match.
        if (one !== undefined && two !== undefined) one.responseBody = two.responseBody
        return yield* store.claim(keyRequest())
      }))
    expectDefect(exit)
  })
})
