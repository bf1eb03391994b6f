/**
 * The catalog at scale: 1,000,000 demo hooks (100,000 with --quick), seeded once into
 * hookline_bench_catalog_<count> and reused while the generator, the migrations and the count match, then metered search (common word, rare word,
 * several words, no match), category lists and single hooks under 32 concurrent clients over
 * loopback HTTP, against the bare baseline issuing the same SQL (src/Hooks/CatalogSql.ts) with
 * the same Ledger statements and the same first-page cache logic.
 *
 * Each request draws its query from a pool of its kind, and the main rows run with the
 * first-page cache off (CATALOG_CACHE_ENTRIES=0) on both sides, so every request does the full
 * search; the "(cached)" rows show a popular query served from the cache, metering included.
 * The two mixes against a naive ts_rank run with the cache on: the Zipf mix (some queries
 * repeat, as users' do) and the cold uniform mix (every request's query new: no cache helps).
 * `BENCH_CATALOG_ROWS=cold` runs only the rows whose name contains one of its comma-separated words.
 *
 * This file is also the baseline's route module for these routes (its default export).
 */
import { createHash, createHmac, randomBytes } from "node:crypto"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { Option, Redacted } from "effect"
import Pg from "pg"
import { decodeCursor, signCursor } from "../src/Cursor.js"
import {
  catalogVersionSql,
  categoryExistsSql,
  hookSql,
  listPageSql,
  searchPageSql,
  topSortMs
} from "../src/Hooks/CatalogSql.js"
import { seedDemoDatabase } from "../src/Hooks/DemoCatalog.js"
import { cursorBinding, ListPosition, SearchPosition } from "../src/Hooks/HookCatalog.js"
import { migrationsDirectory } from "../src/Sql.js"
import { defaultDemoSeed, demoCategories, demoHook } from "../src/Hooks/DemoData.js"
import { type BaselineContext, type BaselineRouteModule, charge, newId, reserve, settle } from "./support/baseline.js"
import { adminDatabaseUrl, createAccounts, startBaseline, startHookline } from "./support/processes.js"
import { type BenchOptions, benchSettings, type ScenarioResult } from "./support/report.js"
import { runPairedHttpLoad } from "./support/wrk.js"

/** Hooks in the catalog: 1,000,000 (100,000 with --quick); BENCH_CATALOG_SIZE overrides both. */
const catalogSizeFor = (quick: boolean) => Number(process.env.BENCH_CATALOG_SIZE ?? (quick ? 100_000 : 1_000_000))

/** One database per size, so quick and full runs each keep their seeded catalog. */
const databaseNameFor = (count: number) => `hookline_bench_catalog_${count}`

/** What the seeded hooks must match to be reused: the size and the generator's output at both ends. */
const fingerprint = (count: number) =>
  createHmac("sha256", "catalog-bench")
    .update(`${count}\n${defaultDemoSeed}\n${JSON.stringify(demoHook(0))}\n${JSON.stringify(demoHook(count - 1))}\n`)
    .digest("hex")

/** Each migration file's content hash, by file name. */
const migrationHashes = (): Record<string, string> =>
  Object.fromEntries(readdirSync(migrationsDirectory).sort().map((file) =>
    [file, createHash("sha256").update(readFileSync(join(migrationsDirectory, file))).digest("hex")]))

/**
 * Whether a database migrated with `recorded` can be brought up to date by migrating forward:
 * every file it was migrated with is still there unchanged (new files are applied on top, as in
 * a deployment; an edited or removed one means the schema may differ, so it is seeded again).
 */
const migratesForward = (recorded: Record<string, string>, current: Record<string, string>) =>
  Object.entries(recorded).every(([file, hash]) => current[file] === hash)

const databaseUrlOf = (name: string) => {
  const url = new URL(adminDatabaseUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** The recorded seed of the database at `url`: its fingerprint and the migrations it was migrated with, or null. */
const recordedSeed = async (url: string) => {
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client
      .query<{ fingerprint: string; migrations: Record<string, string> }>("SELECT fingerprint, migrations FROM bench_catalog_seed")
      .catch(() => ({ rows: [] }))
    return rows[0] ?? null
  } finally {
    await client.end()
  }
}

/** Runs `statements` on the database at `url`, one after the other. */
const runStatements = async (url: string, statements: ReadonlyArray<readonly [string, ReadonlyArray<unknown>?]>) => {
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  try {
    for (const [text, params] of statements) await client.query(text, params === undefined ? [] : [...params])
  } finally {
    await client.end()
  }
}

const vacuumCatalog = ["hooks", "hook_search", "hook_search_postings"].map((table) => [`VACUUM (ANALYZE) ${table}`] as const)

/**
 * The seeded catalog database: reused when its hooks match and its migrations can be brought up
 * to date by migrating forward (the real server applies new ones, then the tables are vacuumed
 * again); otherwise recreated, migrated by the real server, seeded and vacuumed (so index-only
 * scans see all-visible pages). Seeding 1M hooks takes about 10 minutes on a busy 2-core machine,
 * so a new migration elsewhere in the tree does not throw the seeded catalog away.
 */
export const prepareCatalogDatabase = async (count: number, progress: (text: string) => void = () => {}) => {
  const databaseName = databaseNameFor(count)
  const url = databaseUrlOf(databaseName)
  const current = migrationHashes()
  const admin = new Pg.Client({ connectionString: adminDatabaseUrl })
  await admin.connect()
  let recorded: Record<string, string> | null = null
  try {
    const exists = (await admin.query("SELECT 1 FROM pg_database WHERE datname = $1", [databaseName])).rows.length > 0
    const seed = exists ? await recordedSeed(url) : null
    if (seed !== null && seed.fingerprint === fingerprint(count) && migratesForward(seed.migrations, current)) recorded = seed.migrations
    if (recorded === null) {
      await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`)
      await admin.query(`CREATE DATABASE ${databaseName}`)
    }
  } finally {
    await admin.end()
  }
  const recordMigrations = ["UPDATE bench_catalog_seed SET migrations = $1", [JSON.stringify(current)]] as const
  if (recorded !== null) {
    const added = Object.keys(current).filter((file) => !(file in recorded))
    if (added.length > 0) {
      progress(`catalog: migrating the seeded ${databaseName} forward (${added.join(", ")})`)
      const migrated = await startHookline(url)
      await migrated.stop()
      await runStatements(url, [...vacuumCatalog, recordMigrations])
    }
    progress(`catalog: reusing ${count.toLocaleString("en-US")} seeded hooks in ${databaseName}`)
    return url
  }
  // The server runs the migrations; seeding then goes straight to the database.
  const migrated = await startHookline(url)
  await migrated.stop()
  const started = performance.now()
  let last = 0
  await seedDemoDatabase(url, count, {
    onProgress: (written) => {
      if (written - last >= 100_000 || written === count) {
        last = written
        progress(`catalog: seeded ${written.toLocaleString("en-US")} / ${count.toLocaleString("en-US")} hooks (${((performance.now() - started) / 1000).toFixed(0)} s)`)
      }
    }
  })
  await runStatements(url, [
    ...vacuumCatalog,
    ["CREATE TABLE bench_catalog_seed (fingerprint text NOT NULL, migrations jsonb NOT NULL)"],
    ["INSERT INTO bench_catalog_seed VALUES ($1, '{}')", [fingerprint(count)]],
    recordMigrations
  ])
  progress(`catalog: seeded and vacuumed in ${((performance.now() - started) / 1000).toFixed(0)} s`)
  return url
}

/** Query pools, one per scenario kind; a request takes the next one of its pool. */
export const queries = {
  // Each matches 4–9 % of the demo catalog (after stemming).
  common: ["day", "try", "learn", "want", "need", "tell", "watch", "see", "way", "advice", "routine", "save"],
  // Each matches about 0.05–0.2 %.
  rare: ["reykjavik", "marrakesh", "hanoi", "bogota", "helsinki", "nairobi", "doormat", "flashlight", "clothespin", "lazy susan"],
  // Two or three words that occur together in many hooks.
  multi: ["save money", "morning routine", "build muscle", "cheap flights", "clear skin", "meal prep", "credit score", "fall asleep faster"],
  // Words that are in no hook.
  none: ["xylophone", "quasar", "zeppelin", "fjord", "narwhal", "obelisk", "kumquat", "theremin"]
} as const

// ---------------------------------------------------------------------------------------------
// The baseline's routes: same validation order, same statements, same cache logic, no framework.

/** Ranked search the obvious way: $1 query, $2 rows wanted. */
const naiveSearchSql = `
  SELECT ts_rank(s.doc, q) AS k1, s.sort_ms AS k2, h.id, h.text, h.platform, h.media_type, h.thumbnail_url,
         h.category, h.hook_duration_sec, h.published_at
    FROM hook_search s JOIN hooks h ON h.id = s.id, plainto_tsquery('english', $1::text) q
   WHERE s.doc @@ q
   ORDER BY ts_rank(s.doc, q) DESC, s.sort_ms DESC, s.id DESC
   LIMIT $2::integer`

/**
 * Queries as users send them: a Zipf-like mix where a few common words come up most often.
 * Every pool's first entries weigh more than its last ones.
 */
export const zipfQueries = (count: number): Array<string> => {
  const weighted = [
    ...queries.common.map((q, rank) => ({ q, weight: 12 / (rank + 1) })),
    ...queries.multi.map((q, rank) => ({ q, weight: 4 / (rank + 1) })),
    ...queries.rare.map((q, rank) => ({ q, weight: 2 / (rank + 1) })),
    ...queries.none.map((q, rank) => ({ q, weight: 1 / (rank + 1) }))
  ]
  const total = weighted.reduce((sum, entry) => sum + entry.weight, 0)
  // Deterministic: the i-th query is the one whose cumulative weight covers (i × golden ratio) mod 1.
  return Array.from({ length: count }, (_, i) => {
    let point = ((i * 0.6180339887) % 1) * total
    for (const entry of weighted) {
      point -= entry.weight
      if (point <= 0) return entry.q
    }
    return weighted[0].q
  })
}

/**
 * Queries as if every user asked something new: the distinct phrases of one, two and three
 * consecutive words in the catalog's own hooks (so common words, rare ones, phrases and
 * stop-word-only text alike), in an order that mixes them, each once. Uniform: every distinct
 * phrase is as likely as any other, and no first-page cache can serve any of them.
 */
export const coldQueries = (catalogSize: number, count: number): Array<string> => {
  const phrases = new Set<string>()
  for (let i = 0; phrases.size < count && i < catalogSize; i++) {
    const words = demoHook((i * 7_919) % catalogSize).text.toLowerCase().match(/[a-z0-9']+/g) ?? []
    for (let length = 1; length <= 3; length++) {
      for (let start = 0; start + length <= words.length; start++) phrases.add(words.slice(start, start + length).join(" "))
    }
  }
  const shuffled = [...phrases].map((phrase) => ({ phrase, order: createHash("sha1").update(phrase).digest("hex") }))
  return shuffled.sort((a, b) => (a.order < b.order ? -1 : 1)).slice(0, count).map((entry) => entry.phrase)
}

const pageSize = 50

const baselineRoutes: BaselineRouteModule = ({ pool, authenticate, json }: BaselineContext) => {
  const secret = Redacted.make(randomBytes(32).toString("base64url"))
  const cacheEntries = Number(process.env.CATALOG_CACHE_ENTRIES ?? 1_000)
  const cache = new Map<string, { version: number; rows: Array<Record<string, unknown>> }>()
  const error = (status: number, type: string, message: string) => json({ error: { type, message, request_id: newId("req") } }, status)

  const lean = (row: Record<string, unknown>) => ({
    id: row.id,
    text: row.text,
    platform: row.platform,
    media_type: row.media_type,
    thumbnail_url: row.thumbnail_url,
    category: row.category,
    hook_duration_sec: row.hook_duration_sec,
    published_at: row.published_at === null ? null : (row.published_at as Date).toISOString()
  })
  const cached = async (key: string, first: boolean, load: () => Promise<Array<Record<string, unknown>>>) => {
    if (!first || cacheEntries <= 0) return load()
    const version = Number((await pool.query<{ version: string }>(catalogVersionSql)).rows[0].version)
    const hit = cache.get(key)
    if (hit !== undefined && hit.version === version) return hit.rows
    const rows = await load()
    cache.set(key, { version, rows })
    if (cache.size > cacheEntries) cache.delete(cache.keys().next().value!)
    return rows
  }
  const page = async (
    caller: { readonly accountId: string; readonly keyId: string },
    operation: "search" | "list",
    binding: string,
    rows: () => Promise<Array<Record<string, unknown>>>,
    position: (row: Record<string, unknown>) => unknown
  ) => {
    const hold = await reserve(pool, caller.accountId, 2, { operation, requestId: newId("req"), keyId: caller.keyId })
    if (hold === null) return error(402, "insufficient_credits", "Not enough credits.")
    const found = await rows()
    const data = found.slice(0, pageSize)
    const charge = Math.ceil(data.length / 25)
    const settled = await settle(pool, hold.id, charge)
    const next = found.length > pageSize ? signCursor(secret, binding, position(data[data.length - 1])) : null
    return json(
      { object: "list", data: data.map(lean), has_more: next !== null, next_cursor: next },
      200,
      { "x-credits-charged": String(charge), "x-credits-remaining": String((settled?.monthly ?? 0) + (settled?.topup ?? 0)) }
    )
  }

  return {
    "GET /v1/hooks/search": async (request, url) => {
      const caller = await authenticate(request, url, "hooks:read")
      if (caller instanceof Response) return caller
      const q = url.searchParams.get("q") ?? ""
      const query = q.trim().replace(/\s+/g, " ").toLowerCase()
      if (q.length < 1 || q.length > 200 || query === "") return error(422, "validation_error", "q: invalid")
      const cursor = url.searchParams.get("cursor")
      const binding = cursorBinding("search", query)
      const after = cursor === null ? null : Option.getOrNull(decodeCursor(secret, binding, cursor, SearchPosition))
      if (cursor !== null && after === null) return error(400, "invalid_cursor", "Bad cursor.")
      return page(caller, "search", binding, () =>
        cached(`search\0${query}`, after === null, async () =>
          (await pool.query(searchPageSql, [query, after?.[0] ?? null, after?.[1] ?? null, after?.[2] ?? null, pageSize + 1, 10_000])).rows), (row) => [row.k1, Number(row.k2), row.id])
    },
    // The straightforward ranked search: every match scored with ts_rank, ties by newest then id,
    // no cache, the same metering. What "search at 1M" is measured against.
    "GET /naive/hooks/search": async (request, url) => {
      const caller = await authenticate(request, url, "hooks:read")
      if (caller instanceof Response) return caller
      const query = (url.searchParams.get("q") ?? "").trim().replace(/\s+/g, " ").toLowerCase()
      if (query === "" || query.length > 200) return error(422, "validation_error", "q: invalid")
      return page(caller, "search", cursorBinding("search", query), async () =>
        (await pool.query(naiveSearchSql, [query, pageSize + 1])).rows, (row) => [row.k1, Number(row.k2), row.id])
    },
    "GET /v1/hooks/list": async (request, url) => {
      const caller = await authenticate(request, url, "hooks:read")
      if (caller instanceof Response) return caller
      const category = url.searchParams.get("category") ?? ""
      if (!/^[a-z0-9]+(?:-[a-z0-9]+)*$/.test(category) || category.length > 64) return error(422, "validation_error", "category: invalid")
      const cursor = url.searchParams.get("cursor")
      const binding = cursorBinding("list", category)
      const after = cursor === null ? null : Option.getOrNull(decodeCursor(secret, binding, cursor, ListPosition))
      if (cursor !== null && after === null) return error(400, "invalid_cursor", "Bad cursor.")
      if (!(await pool.query<{ found: boolean }>(categoryExistsSql, [category])).rows[0].found) {
        return error(422, "validation_error", "category: unknown slug")
      }
      return page(caller, "list", binding, () =>
        cached(`list\0${category}`, after === null, async () =>
          (await pool.query(listPageSql, [category, after?.[0] ?? topSortMs, after?.[1] ?? "", pageSize + 1])).rows), (row) => [Number(row.k2), row.id])
    },
    "GET /v1/hooks/:id": async (request, url, params) => {
      const caller = await authenticate(request, url, "hooks:read")
      if (caller instanceof Response) return caller
      if (!/^hook_[0-9a-f]{32}$/.test(params.id)) return error(404, "not_found", "No such hook.")
      const { rows } = await pool.query(hookSql, [params.id])
      if (rows.length === 0) return error(404, "not_found", "No such hook.")
      const settled = await charge(pool, caller.accountId, 1, { operation: "hook", referenceId: params.id, requestId: newId("req"), keyId: caller.keyId })
      if (settled === null) return error(402, "insufficient_credits", "Not enough credits.")
      const row = rows[0]
      return json(
        {
          ...lean(row),
          source_url: row.source_url,
          caption: row.caption,
          duration_sec: row.duration_sec,
          summary: row.summary,
          emotions: row.emotions,
          comment_themes: row.comment_themes,
          metrics: row.metrics,
          creator: row.creator,
          audio: row.audio
        },
        200,
        { "x-credits-charged": "1", "x-credits-remaining": String((settled?.monthly ?? 0) + (settled?.topup ?? 0)) }
      )
    }
  }
}
export default baselineRoutes

// ---------------------------------------------------------------------------------------------

export interface CatalogBenchOptions extends BenchOptions {
  readonly progress?: (text: string) => void
}

export const runCatalogBench = async (options: CatalogBenchOptions): Promise<Array<ScenarioResult>> => {
  const settings = benchSettings(options)
  const progress = options.progress ?? ((text: string) => console.error(`[bench catalog] ${text}`))
  const catalogSize = catalogSizeFor(options.quick)
  const databaseUrl = await prepareCatalogDatabase(catalogSize, progress)
  const sample = Math.min(catalogSize, 1_000_000)
  const hookIds = Array.from({ length: 2_000 }, (_, i) => demoHook(Math.floor((i * 7_919) % sample)).id)
  const slugs = demoCategories.map((category) => category.slug)
  const size = catalogSize.toLocaleString("en-US")

  type Scenario = {
    readonly scenario: string
    readonly operation: string
    readonly path: (iteration: number, worker: number) => string
    /** The baseline's path when it differs (the naive search). */
    readonly baselinePath?: (iteration: number, worker: number) => string
    /**
     * Measured windows per side (default `pairedRounds` in support/wrk.ts, taking turns). The naive search answers in seconds:
     * its queries outlive a 3 s window and would run on into the other side's, so that row
     * measures each side once, one after the other.
     */
    readonly rounds?: number
    /**
     * wrk's wait for one answer. One naive ranked query over 1M hooks takes ~1 s alone, and 32 in
     * flight queue behind a pool of 10 for longer than wrk's default 10 s: with it, the naive side
     * answered nothing (32 socket errors) on the 2-core development machine.
     */
    readonly timeoutSeconds?: number
    /** Rounds of 32 requests (one per key) wrk cycles through: 64 unless the row needs every request's query new. */
    readonly iterations?: number
    /** The warm-up's own rounds, after the measured ones (`iterations` on), so no measured query was asked before. */
    readonly warmupIterations?: number
  }
  const mix = zipfQueries(2_048)
  // Enough new queries for 15 s measured and 10 s of warm-up at a few thousand req/s.
  const coldIterations = { measured: 940, warmup: 320 }
  const cold = coldQueries(catalogSize, (coldIterations.measured + coldIterations.warmup) * settings.concurrency)
  const coldMix = (prefix: string) => (iteration: number, worker: number) =>
    `${prefix}?q=${encodeURIComponent(cold[(iteration * settings.concurrency + worker) % cold.length])}`
  const mixed = (prefix: string) => (iteration: number, worker: number) =>
    `${prefix}?q=${encodeURIComponent(mix[(iteration * 32 + worker) % mix.length])}`
  const search = (pool: ReadonlyArray<string>) => (iteration: number, worker: number) =>
    `/v1/hooks/search?q=${encodeURIComponent(pool[(iteration * 7 + worker) % pool.length])}`
  const scenarios = (cached: boolean): Array<Scenario> =>
    cached
      ? [
        { scenario: "metered search, common word (cached)", operation: `GET /v1/hooks/search?q=day, ${size} hooks`, path: () => "/v1/hooks/search?q=day" },
        { scenario: "metered search, multi-word (cached)", operation: `GET /v1/hooks/search?q=morning+routine, ${size} hooks`, path: () => "/v1/hooks/search?q=morning%20routine" },
        {
          scenario: "search, Zipf mix vs naive ts_rank",
          operation: `GET /v1/hooks/search, ${new Set(mix).size} queries in a Zipf-like mix, ${size} hooks; baseline ranks every match`,
          path: mixed("/v1/hooks/search"),
          baselinePath: mixed("/naive/hooks/search"),
          rounds: 1,
          timeoutSeconds: 120
        },
        {
          scenario: "search, cold uniform mix vs naive ts_rank",
          operation: `GET /v1/hooks/search, ${(coldIterations.measured * settings.concurrency).toLocaleString("en-US")} distinct 1–3 word phrases of the catalog, each asked once (no cache help), ${size} hooks; baseline ranks every match`,
          path: coldMix("/v1/hooks/search"),
          baselinePath: coldMix("/naive/hooks/search"),
          rounds: 1,
          timeoutSeconds: 120,
          iterations: coldIterations.measured,
          warmupIterations: coldIterations.warmup
        }
      ]
      : [
        { scenario: "metered search, common word", operation: `GET /v1/hooks/search, ${queries.common.length} words of 4–9 %, ${size} hooks`, path: search(queries.common) },
        { scenario: "metered search, rare word", operation: `GET /v1/hooks/search, ${queries.rare.length} words of ≈0.1 %, ${size} hooks`, path: search(queries.rare) },
        { scenario: "metered search, multi-word", operation: `GET /v1/hooks/search, ${queries.multi.length} phrases, ${size} hooks`, path: search(queries.multi) },
        { scenario: "metered search, no match", operation: `GET /v1/hooks/search, ${queries.none.length} unknown words, ${size} hooks`, path: search(queries.none) },
        {
          scenario: "list",
          operation: `GET /v1/hooks/list, ${slugs.length} categories, ${size} hooks`,
          path: (iteration, worker) => `/v1/hooks/list?category=${slugs[(iteration + worker) % slugs.length]}`
        },
        {
          scenario: "get hook",
          operation: `GET /v1/hooks/{id}, ${size} hooks`,
          path: (iteration, worker) => `/v1/hooks/${hookIds[(iteration * 31 + worker * 131) % hookIds.length]}`
        }
      ]

  const rows: Array<ScenarioResult> = []
  for (const cached of [false, true]) {
    if (!scenarios(cached).some(wantedRow)) continue
    const env = { CATALOG_CACHE_ENTRIES: cached ? "1000" : "0" }
    const hookline = await startHookline(databaseUrl, env)
    let baseline: Awaited<ReturnType<typeof startBaseline>> | null = null
    try {
      const accounts = await createAccounts(hookline, settings.concurrency)
      baseline = await startBaselineWith(databaseUrl, env)
      const keyOf = (worker: number) => ({ authorization: `Bearer ${accounts[worker % accounts.length].key}` })
      for (const scenario of scenarios(cached).filter(wantedRow)) {
        progress(scenario.scenario)
        // The same cycle of requests for both sides: each of the 32 keys with 64 paths of the pool (or the row's own count).
        const requests = (path: (iteration: number, worker: number) => string, iterations: number, first = 0) =>
          Array.from({ length: iterations }, (_, iteration) =>
            Array.from({ length: settings.concurrency }, (_, worker) => ({ path: path(first + iteration, worker), headers: keyOf(worker) }))).flat()
        const iterations = scenario.iterations ?? 64
        const side = (server: { readonly url: string; readonly pid: number }, path: (iteration: number, worker: number) => string) => ({
          url: server.url,
          serverPid: server.pid,
          requests: requests(path, iterations),
          ...(scenario.warmupIterations === undefined ? {} : { warmupRequests: requests(path, scenario.warmupIterations, iterations) })
        })
        // Both sides take turns (bench/support/wrk.ts, runPairedHttpLoad), so they share the machine's minutes.
        const [hooklineSide, baselineSide] = await runPairedHttpLoad(
          [side(hookline, scenario.path), side(baseline, scenario.baselinePath ?? scenario.path)],
          { ...settings, rounds: scenario.rounds, timeoutSeconds: scenario.timeoutSeconds }
        )
        rows.push({ scenario: scenario.scenario, operation: scenario.operation, unit: "req/s", hookline: hooklineSide, baseline: baselineSide })
      }
    } finally {
      await baseline?.stop()
      await hookline.stop()
    }
  }
  return rows
}

/** Whether BENCH_CATALOG_ROWS (comma-separated words; all rows when unset) asks for this row. */
const wantedRow = ({ scenario }: { readonly scenario: string }) => {
  const words = (process.env.BENCH_CATALOG_ROWS ?? "").split(",").filter((word) => word !== "")
  return words.length === 0 || words.some((word) => scenario.includes(word))
}

/** The baseline with this file's routes and the same cache setting as the server. */
const startBaselineWith = (databaseUrl: string, env: Record<string, string>) =>
  startBaseline(databaseUrl, ["bench/catalog.ts"], env)
