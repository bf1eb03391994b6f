/**
 * CatalogRepo in memory: the same methods as the PostgreSQL repository (Repo.ts), for tests of
 * the catalog service that need no database; the PostgreSQL repository remains the proof of the SQL.
 * Lookups, category lists, list pages, the substring fallback, upserts and import staging follow
 * the SQL's rules and order; text compares by UTF-16 code unit (the database by its collation,
 * C.UTF-8 in the tests: the two agree on ids, slugs and ASCII names).
 *
 * What differs:
 * - The nearest hooks to a line follow the database's rule and numbers (NeighbourRule.ts), on the
 *   lexemes EnglishLexemes.ts makes of each hook.
 * - Full-text search is a case-insensitive match of whole words (runs of letters and digits), with
 *   no stemming and no stop words: a hook matches when it holds every word of the query, k1 is how
 *   many times the query's words occur in it, ordered (k1, sort_ms, id) descending. PostgreSQL ranks
 *   several words with ts_rank; for one word that is neither stemmed nor a stop word both agree.
 *   The substring fallback runs for a query with no letter or digit (PostgreSQL: with no word that
 *   is not a stop word).
 * - The catalog version grows by one per write to the hooks (the triggers may add more); callers
 *   only compare it with an earlier value.
 * - Import staging lives from createImportStaging until the next one (PostgreSQL drops the table
 *   when the import's transaction ends). `analyzeCatalog` has nothing to do. No page times out.
 *   JSON columns come back as written (jsonb may reorder an object's keys).
 */
import { Effect, Layer, Option } from "effect"
import type { HookCategory } from "./Api.js"
import { topSortMs } from "./CatalogSql.js"
import { toLean } from "./HookCatalog.js"
import { lexemesOf } from "./EnglishLexemes.js"
import type { HookRecord } from "./HookRecord.js"
import { nearestInMemory, type NeighbourBounds, neighbourBounds } from "./NeighbourRule.js"
import { CatalogRepo, type ListPageRequest, type ListRow, type RichRow, type SearchPageRequest, type SearchRow } from "./Repo.js"

/** hook_search.sort_ms of a hook without published_at (migration 0002): below every real date. */
const undatedSortMs = -topSortMs

export interface MemoryCatalogState {
  /** slug → name */
  categories: Map<string, string>
  /** The hooks as the database holds them (published_at a Date, JSON columns copied). */
  hooks: Map<string, RichRow>
  /** catalog_state.version: starts at 1 like the migration's row. */
  version: number
  /** The import's staging rows with their seq; null before createImportStaging. */
  staging: Array<{ readonly row: RichRow; readonly seq: number }> | null
}

export interface CatalogSeed {
  readonly categories?: ReadonlyArray<HookCategory>
  readonly hooks?: ReadonlyArray<HookRecord>
}

type Repo = CatalogRepo["Service"]

/** A JSON column as jsonb gives it back: a copy through JSON, absent as null. */
const jsonb = (value: unknown): unknown => (value === null || value === undefined ? null : JSON.parse(JSON.stringify(value)))

/** A record as the hooks table stores it. */
const toRow = (record: HookRecord): RichRow => ({
  id: record.id,
  text: record.text,
  platform: record.platform,
  media_type: record.media_type ?? null,
  thumbnail_url: record.thumbnail_url ?? null,
  category: record.category ?? null,
  hook_duration_sec: record.hook_duration_sec ?? null,
  published_at: record.published_at === null || record.published_at === undefined ? null : new Date(record.published_at),
  source_url: record.source_url ?? null,
  caption: record.caption ?? null,
  duration_sec: record.duration_sec ?? null,
  summary: record.summary ?? null,
  emotions: jsonb(record.emotions),
  comment_themes: jsonb(record.comment_themes),
  metrics: jsonb(record.metrics),
  creator: jsonb(record.creator),
  audio: jsonb(record.audio)
})

/** The lean columns of a row, as the catalog answers them but with published_at a Date of its own (rows never share the state's). */
const leanOf = (row: RichRow) => ({ ...toLean(row), published_at: row.published_at === null ? null : new Date(row.published_at.getTime()) })

const sortMsOf = (row: RichRow) => (row.published_at === null ? undatedSortMs : Math.floor(row.published_at.getTime()))

/** Text order by code unit, as `<` on strings. */
const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** Row-value comparison, as PostgreSQL's `(a, b, …) < (x, y, …)`: the first differing key decides. */
const compareKeys = (a: ReadonlyArray<number | string>, b: ReadonlyArray<number | string>) => {
  for (let i = 0; i < a.length; i++) {
    const x = a[i]
    const y = b[i]
    const order = typeof x === "number" && typeof y === "number" ? (x < y ? -1 : x > y ? 1 : 0) : compareText(String(x), String(y))
    if (order !== 0) return order
  }
  return 0
}

/** Words as the memory search sees them: runs of letters and digits, lowercased. */
const wordsOf = (text: string): Array<string> => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []

/** An ON CONFLICT DO UPDATE statement refuses to touch one row twice; so does this. */
const refuseRepeatedIds = (ids: ReadonlyArray<string>, what: string) => {
  const seen = new Set<string>()
  for (const id of ids) {
    if (seen.has(id)) throw new Error(`${what}: ON CONFLICT DO UPDATE command cannot affect row a second time (${id})`)
    seen.add(id)
  }
}

const categoryStatements = (state: MemoryCatalogState) => ({
  categories: Effect.sync(() =>
    [...state.categories]
      .map(([slug, name]) => ({ slug, name }))
      .sort((a, b) => compareText(a.name, b.name) || compareText(a.slug, b.slug))
  ),
  /** The last name given for a slug wins, as in the SQL repository. */
  replaceCategories: (input: ReadonlyArray<HookCategory>) =>
    Effect.sync(() => {
      state.categories = new Map(input.map((category) => [category.slug, category.name]))
    }),
  mergeCategories: (input: ReadonlyArray<HookCategory>) =>
    Effect.try({
      try: () => {
        refuseRepeatedIds(input.map((category) => category.slug), "mergeCategories")
        for (const category of input) state.categories.set(category.slug, category.name)
      },
      catch: (error) => error
    }).pipe(Effect.orDie),
  categoryExists: (slug: string) => Effect.sync(() => state.categories.has(slug))
})

const pageStatements = (state: MemoryCatalogState) => {
  /** Every hook below `after` in (keys) order, descending, at most `rows`. */
  const page = <K extends ReadonlyArray<number | string>>(
    candidates: ReadonlyArray<RichRow>,
    keys: (row: RichRow) => K,
    after: K | null,
    rows: number
  ) =>
    candidates
      .map((row) => ({ row, keys: keys(row) }))
      .filter((entry) => after === null || compareKeys(entry.keys, after) < 0)
      .sort((a, b) => compareKeys(b.keys, a.keys))
      .slice(0, Math.max(0, rows))

  /** hook_substring_page: the lowercased text contains the query; (sort_ms, id) descending, k1 null. */
  const substringRows = ({ after: [, k2, id], query, rows }: SearchPageRequest): ReadonlyArray<SearchRow> => {
    const matches = [...state.hooks.values()].filter((row) => row.text.toLowerCase().includes(query))
    const start = k2 === null || id === null ? null : [k2, id] as const
    return page(matches, (row) => [sortMsOf(row), row.id] as const, start, rows).map((entry) => ({
      ...leanOf(entry.row),
      k1: null,
      k2: entry.keys[0]
    }))
  }

  const searchPage = (request: SearchPageRequest) =>
    Effect.sync((): ReadonlyArray<SearchRow> => {
      const { after: [k1, k2, id], query, rows } = request
      const wanted = [...new Set(wordsOf(query))]
      // No word to search for: the substring fallback, as hook_search_page does.
      if (wanted.length === 0) return substringRows(request)
      const scored = new Map<string, number>()
      for (const row of state.hooks.values()) {
        const words = wordsOf(row.text)
        const counts = wanted.map((word) => words.filter((w) => w === word).length)
        if (counts.every((count) => count > 0)) scored.set(row.id, counts.reduce((sum, count) => sum + count, 0))
      }
      const matches = [...state.hooks.values()].filter((row) => scored.has(row.id))
      const start = id === null ? null : [k1 ?? Number.POSITIVE_INFINITY, k2 ?? Number.MAX_SAFE_INTEGER, id] as const
      return page(matches, (row) => [scored.get(row.id) ?? 0, sortMsOf(row), row.id] as const, start, rows).map((entry) => ({
        ...leanOf(entry.row),
        k1: entry.keys[0],
        k2: entry.keys[1]
      }))
    })

  /** A category's hooks by (sort_ms, id) descending. */
  const listPage = ({ after, category, rows }: ListPageRequest) =>
    Effect.sync((): ReadonlyArray<ListRow> => {
      const inCategory = [...state.hooks.values()].filter((row) => row.category === category)
      return page(inCategory, (row) => [sortMsOf(row), row.id] as const, after, rows).map((entry) => ({
        ...leanOf(entry.row),
        k2: entry.keys[0]
      }))
    })

  return { searchPage, listPage }
}

/** The nearest hooks to a line, by NeighbourRule.ts on each hook's lexemes. */
const neighbourStatements = (state: MemoryCatalogState) => {
  /** A row's lexemes, kept while the row is (a write replaces the row object). */
  const lexemes = new WeakMap<RichRow, ReadonlySet<string>>()
  const lexemesOfRow = (row: RichRow) => {
    const known = lexemes.get(row)
    if (known !== undefined) return known
    const made: ReadonlySet<string> = new Set(lexemesOf(row.text))
    lexemes.set(row, made)
    return made
  }
  const neighbours = (lineLexemes: ReadonlyArray<string>, rows: number, bounds: NeighbourBounds = neighbourBounds) =>
    Effect.sync(() =>
      nearestInMemory(
        [...state.hooks.values()].map((row) => ({ ...row, sortMs: sortMsOf(row), lexemes: lexemesOfRow(row) })),
        lineLexemes,
        rows,
        bounds
      ))
  return { neighbours }
}

const writeStatements = (state: MemoryCatalogState) => {
  /** Writes rows (ids distinct); answers which were new. Any write moves the catalog version on. */
  const write = (rows: ReadonlyArray<RichRow>) => {
    const inserted = rows.filter((row) => !state.hooks.has(row.id)).length
    for (const row of rows) state.hooks.set(row.id, row)
    state.version++
    return inserted
  }

  const staging = (what: string) => {
    if (state.staging === null) throw new Error(`${what}: relation "hook_import_staging" does not exist`)
    return state.staging
  }

  const orDie = <A>(run: () => A) => Effect.try({ try: run, catch: (error) => error }).pipe(Effect.orDie)

  return {
    findHook: (id: string) =>
      Effect.sync(() =>
        Option.map(Option.fromNullishOr(state.hooks.get(id)), (row): RichRow => ({
          ...row,
          ...leanOf(row),
          emotions: jsonb(row.emotions),
          comment_themes: jsonb(row.comment_themes),
          metrics: jsonb(row.metrics),
          creator: jsonb(row.creator),
          audio: jsonb(row.audio)
        }))
      ),
    upsertHooks: (records: ReadonlyArray<HookRecord>) =>
      orDie(() => {
        if (records.length === 0) return { inserted: 0, updated: 0 }
        refuseRepeatedIds(records.map((record) => record.id), "upsertHooks")
        const inserted = write(records.map(toRow))
        return { inserted, updated: records.length - inserted }
      }),
    analyzeCatalog: () => Effect.void,
    createImportStaging: () =>
      Effect.sync(() => {
        state.staging = []
      }),
    /** Record i of the batch gets seq + i + 1, as the statement's WITH ORDINALITY gives it. */
    stageHooks: (records: ReadonlyArray<HookRecord>, seq: number) =>
      orDie(() => {
        const rows = staging("stageHooks")
        records.forEach((record, i) => rows.push({ row: toRow(record), seq: seq + i + 1 }))
      }),
    /** The latest staged record of each id (highest seq), written in id order; how many ids were new. */
    upsertStagedHooks: () =>
      orDie(() => {
        const latest = new Map<string, { readonly row: RichRow; readonly seq: number }>()
        for (const staged of staging("upsertStagedHooks")) {
          const known = latest.get(staged.row.id)
          if (known === undefined || staged.seq > known.seq) latest.set(staged.row.id, staged)
        }
        return write([...latest.values()].sort((a, b) => compareText(a.row.id, b.row.id)).map((staged) => staged.row))
      })
  }
}

/** A fresh in-memory catalog, optionally seeded: its layer, and its state for a test to read and change. */
export const makeCatalogRepoInMemory = (seed: CatalogSeed = {}) => {
  const state: MemoryCatalogState = {
    categories: new Map((seed.categories ?? []).map((category) => [category.slug, category.name])),
    hooks: new Map((seed.hooks ?? []).map((record) => [record.id, toRow(record)])),
    version: 1,
    staging: null
  }
  const repo: Repo = {
    ...categoryStatements(state),
    catalogVersion: Effect.sync(() => state.version),
    ...pageStatements(state),
    ...neighbourStatements(state),
    ...writeStatements(state)
  }
  return { layer: Layer.succeed(CatalogRepo, repo), state }
}
