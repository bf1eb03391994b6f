/**
 * Every statement the catalog service runs on the catalog tables (`hooks`, `hook_search`,
 * `categories`, `catalog_state`), by what it reads or writes. The statement texts live in
 * CatalogSql.ts, shared with the benchmark's bare baseline; this room runs them through
 * SqlClient (the driver prepares and caches each statement per connection), decodes their rows
 * and makes database and decoding failures defects. Page queries carry SEARCH_TIMEOUT as a
 * deadline that cancels them on the server. The bulk import's staging statements are here too.
 */
import { Array as Arr, Context, Duration, Effect, Layer, Option, Schema, Semaphore } from "effect"
import { SqlClient } from "effect/sql"
import { ServiceUnavailable } from "../Errors.js"
import { atRepoBoundary } from "../Repository.js"
import { onOwnConnection, PageClient } from "../Sql.js"
import { HookCategory, HookLean } from "./Api.js"
import {
  catalogVersionSql,
  categoryExistsSql,
  createImportStagingSql,
  hookColumnParams,
  hookSql,
  lexemesParameter,
  listPageSql,
  neighboursSql,
  searchPageSql,
  stageHooksSql,
  upsertHooksSql,
  upsertStagedHooksSql
} from "./CatalogSql.js"
import { CatalogConfig } from "./Config.js"
import type { HookRecord } from "./HookRecord.js"
import { type NeighbourBounds, neighbourBounds, type NeighbourRow } from "./NeighbourRule.js"

/** A HookLean as the database returns it: published_at is a Date there, not an ISO string. */
export const LeanRow = Schema.Struct({ ...HookLean.fields, published_at: Schema.NullOr(Schema.Date) })
export type LeanRow = typeof LeanRow.Type

/** A search page row: the lean hook and its position keys (rank, sort_ms). */
export const SearchRow = Schema.Struct({ ...LeanRow.fields, k1: Schema.NullOr(Schema.Number), k2: Schema.Number })
export type SearchRow = typeof SearchRow.Type

/** A list page row: the lean hook and its sort_ms. */
export const ListRow = Schema.Struct({ ...LeanRow.fields, k2: Schema.Number })
export type ListRow = typeof ListRow.Type

/** A single hook with every field; the JSON columns are checked by the API schema when answered. */
export const RichRow = Schema.Struct({
  ...LeanRow.fields,
  source_url: Schema.NullOr(Schema.String),
  caption: Schema.NullOr(Schema.String),
  duration_sec: Schema.NullOr(Schema.Number),
  summary: Schema.NullOr(Schema.String),
  emotions: Schema.Unknown,
  comment_themes: Schema.Unknown,
  metrics: Schema.Unknown,
  creator: Schema.Unknown,
  audio: Schema.Unknown
})
export type RichRow = typeof RichRow.Type

/** Parameters of a search page: the normalised query, where the page starts (all null for the first), rows, walk window. */
export interface SearchPageRequest {
  readonly query: string
  readonly after: readonly [k1: number | null, k2: number | null, id: string | null]
  readonly rows: number
  readonly walkWindow: number
}

/** Parameters of a list page: the category, where the page starts, rows. */
export interface ListPageRequest {
  readonly category: string
  readonly after: readonly [k2: number, id: string]
  readonly rows: number
}

type RowsDecoder<A> = (rows: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<A>, Schema.SchemaError>
/** Decoders built once (building a schema per query would cost more than the decoding). */
const rowsOf = <S extends Schema.Decoder<unknown>>(schema: S): RowsDecoder<S["Type"]> =>
  Schema.decodeUnknownEffect(Schema.Array(schema))
/**
 * Page rows skip schema decoding: their columns and types are fixed by searchPageSql and
 * listPageSql (text, float4/float8 → number, timestamptz → Date, int8 → number: Sql.ts registers it), and
 * decoding 51 rows per request cost more CPU than the rest of the page's work. The decoder still
 * checks the shape of the first row, so a schema drift fails loudly instead of answering wrong data.
 */
const pageRows = <S extends Schema.Decoder<{ readonly id: string }>>(schema: S): RowsDecoder<S["Type"]> => {
  const checkOne = Schema.decodeUnknownEffect(schema)
  return (rows) => (rows.length === 0 ? Effect.succeed([]) : Effect.as(checkOne(rows[0]), rows as ReadonlyArray<S["Type"]>))
}
const decodeSearchRows = pageRows(SearchRow)
const decodeListRows = pageRows(ListRow)
const decodeNeighbourRows = rowsOf(
  Schema.Struct({ id: Schema.String, text: Schema.String, category: Schema.NullOr(Schema.String), score: Schema.Number })
)
const decodeRichRows = rowsOf(RichRow)
const decodeCategories = rowsOf(HookCategory)
const decodeFound = rowsOf(Schema.Struct({ found: Schema.Boolean }))
const decodeVersion = rowsOf(Schema.Struct({ version: Schema.Number }))
const decodeInserted = rowsOf(Schema.Struct({ inserted: Schema.Boolean }))
const decodeInsertedCount = rowsOf(Schema.Struct({ inserted: Schema.Number }))

/** How many of an upsert's rows were new, and how many updated. */
const countWritten = (rows: ReadonlyArray<{ readonly inserted: boolean }>) => {
  const inserted = rows.filter((row) => row.inserted).length
  return { inserted, updated: rows.length - inserted }
}

/** The catalog's statements; database and decoding failures are defects at the boundary (atRepoBoundary). */
const statements = (sql: SqlClient.SqlClient) => {
  /** A statement whose plan does not depend on its parameters (lookups, the batch upsert): the driver prepares it once per connection. */
  const read = <A>(decode: RowsDecoder<A>, text: string, params: ReadonlyArray<unknown>) =>
    sql.unsafe(text, params).pipe(Effect.flatMap(decode))

  /**
   * A page. Pages are not prepared: their best plan depends on the parameters (a rare word or a
   * common one, a small category or a large one), which a cached generic plan would ignore.
   */
  const readPage = <A>(decode: RowsDecoder<A>, text: string, params: ReadonlyArray<unknown>) =>
    sql.unsafe(text, params).unprepared.pipe(Effect.flatMap(decode))

  return {
    categories: () => read(decodeCategories, "SELECT slug, name FROM categories ORDER BY name, slug", []),

    /** Replaces the category list in one transaction (hooks keep their category slug even when it is removed). */
    replaceCategories: (input: ReadonlyArray<HookCategory>) =>
      Effect.gen(function*() {
        yield* sql`DELETE FROM categories`
        const unique = [...new Map(input.map((c) => [c.slug, { slug: c.slug, name: c.name }])).values()]
        if (Arr.isArrayNonEmpty(unique)) yield* sql`INSERT INTO categories ${sql.insert(unique)}`
      }).pipe(sql.withTransaction),

    /** Adds categories and renames those already there (the demo seed: nothing is removed). */
    mergeCategories: (input: ReadonlyArray<HookCategory>) =>
      sql`INSERT INTO categories (slug, name) SELECT * FROM unnest(${input.map((c) => c.slug)}::text[], ${input.map((c) => c.name)}::text[])
       ON CONFLICT (slug) DO UPDATE SET name = EXCLUDED.name`.pipe(Effect.asVoid),

    categoryExists: (slug: string) => Effect.map(read(decodeFound, categoryExistsSql, [slug]), (rows) => rows[0]?.found === true),

    /** Bumped by every write to the catalog: cached pages of an older version are stale. */
    catalogVersion: () => Effect.map(read(decodeVersion, catalogVersionSql, []), (rows) => rows[0]?.version ?? 0),

    /** Ranked full-text matches in rank order, or substring matches for a query with no searchable word (hook_search_page). */
    searchPage: ({ after: [k1, k2, id], query, rows, walkWindow }: SearchPageRequest) =>
      readPage(decodeSearchRows, searchPageSql, [query, k1, k2, id, rows, walkWindow]),

    /** A category's hooks, newest first. */
    listPage: ({ after: [k2, id], category, rows }: ListPageRequest) => readPage(decodeListRows, listPageSql, [category, k2, id, rows]),

    /** The hooks nearest to a line's lexemes, nearest first (NeighbourRule.ts). */
    neighbours: (lexemes: ReadonlyArray<string>, rows: number, { commonSample, rareBudget }: NeighbourBounds, walkWindow: number) =>
      readPage(decodeNeighbourRows, neighboursSql, [lexemesParameter(lexemes), rows, rareBudget, commonSample, walkWindow]),

    findHook: (id: string) => Effect.map(read(decodeRichRows, hookSql, [id]), (rows) => Option.fromNullishOr(rows[0])),

    /** Inserts or updates hooks in one statement (a batch must not repeat an id); counts both. */
    upsertHooks: (records: ReadonlyArray<HookRecord>) =>
      records.length === 0
        ? Effect.succeed({ inserted: 0, updated: 0 })
        : Effect.map(Effect.suspend(() => read(decodeInserted, upsertHooksSql, hookColumnParams(records))), countWritten),

    /** Fresh planner statistics on the catalog's tables, after a bulk write. */
    analyzeCatalog: () => Effect.forEach(["hooks", "hook_search", "hook_search_postings"], (table) => sql.unsafe(`ANALYZE ${table}`), { discard: true }),

    ...importStatements(sql)
  }
}

/**
 * A bulk import's statements, in its transaction: a staging table for the import (dropped when
 * it commits), batches staged into it, then one upsert of the staged records into the catalog.
 */
const importStatements = (sql: SqlClient.SqlClient) => ({
  createImportStaging: () => Effect.asVoid(sql.unsafe(createImportStagingSql)),
  /** `seq`: the position of the batch's first record in the import, so the last of several with one id wins. */
  stageHooks: (records: ReadonlyArray<HookRecord>, seq: number) =>
    Effect.asVoid(Effect.suspend(() => sql.unsafe(stageHooksSql, [...hookColumnParams(records), seq]))),
  /** Writes the staged records to the catalog; answers how many ids were new. */
  upsertStagedHooks: () =>
    Effect.flatMap(sql.unsafe(upsertStagedHooksSql), (rows) => Effect.map(decodeInsertedCount(rows), (counted) => counted[0]?.inserted ?? 0))
})

/** The catalog's statements, as HookCatalog, CatalogImport, the demo seed and the tests' in-memory twin (RepoMemory.ts) use them. */
export interface CatalogRepoService {
  /** Every category, by name then slug. */
  readonly categories: Effect.Effect<ReadonlyArray<HookCategory>>
  /** Replaces the category list in one transaction (hooks keep their category slug even when it is removed). */
  readonly replaceCategories: (input: ReadonlyArray<HookCategory>) => Effect.Effect<void>
  /** Adds categories and renames those already there (nothing is removed; a batch must not repeat a slug). */
  readonly mergeCategories: (input: ReadonlyArray<HookCategory>) => Effect.Effect<void>
  readonly categoryExists: (slug: string) => Effect.Effect<boolean>
  /** Moved on by every write to the hooks: a page cached at an older version is stale. */
  readonly catalogVersion: Effect.Effect<number>
  /** Ranked full-text matches, or substring matches for a query with no searchable word; under SEARCH_TIMEOUT. */
  readonly searchPage: (request: SearchPageRequest) => Effect.Effect<ReadonlyArray<SearchRow>, ServiceUnavailable>
  /** A category's hooks, newest first; under SEARCH_TIMEOUT. */
  readonly listPage: (request: ListPageRequest) => Effect.Effect<ReadonlyArray<ListRow>, ServiceUnavailable>
  /** The hooks nearest to a line's lexemes, nearest first (NeighbourRule.ts); under SEARCH_TIMEOUT. */
  readonly neighbours: (
    lexemes: ReadonlyArray<string>,
    rows: number,
    bounds?: NeighbourBounds
  ) => Effect.Effect<ReadonlyArray<NeighbourRow>, ServiceUnavailable>
  readonly findHook: (id: string) => Effect.Effect<Option.Option<RichRow>>
  /** Inserts or updates hooks in one statement (a batch must not repeat an id); counts both. */
  readonly upsertHooks: (records: ReadonlyArray<HookRecord>) => Effect.Effect<{ readonly inserted: number; readonly updated: number }>
  /** Fresh planner statistics on the catalog's tables, after a bulk write. */
  readonly analyzeCatalog: () => Effect.Effect<void>
  /** A bulk import's staging table, in the import's transaction (dropped when it commits). */
  readonly createImportStaging: () => Effect.Effect<void>
  /** Stages a batch; `seq`: the position of its first record in the import, so the last of several with one id wins. */
  readonly stageHooks: (records: ReadonlyArray<HookRecord>, seq: number) => Effect.Effect<void>
  /** Writes the staged records to the catalog; how many ids were new. */
  readonly upsertStagedHooks: () => Effect.Effect<number>
}

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const config = yield* CatalogConfig
  const { searchTimeout } = config
  const bounded = atRepoBoundary("CatalogRepo", statements(sql))
  // Pages run on connections of their own (PageClient); a repository built on a bare client uses that.
  const pageSql = Option.getOrElse(yield* Effect.serviceOption(PageClient), () => sql)
  const pages = pageSql === sql ? bounded : atRepoBoundary("CatalogRepo", statements(pageSql))

  const pageTurns = yield* Semaphore.make(config.searchConcurrency)

  /**
   * A page under SEARCH_TIMEOUT, in its turn (SEARCH_CONCURRENCY), on a connection of its own.
   * Past the deadline, waiting or running, the statement is interrupted, which makes the driver
   * cancel the query on the server and wait for it to stop; only then is the caller answered 503.
   */
  const underDeadline = (what: string, advice: string) => <A>(page: Effect.Effect<A>) =>
    Effect.timeoutOrElse(pageTurns.withPermits(1)(onOwnConnection(pageSql, page)), {
      duration: searchTimeout,
      orElse: () =>
        Effect.fail(new ServiceUnavailable({ message: `The ${what} took longer than ${Duration.format(searchTimeout)}; ${advice}` }))
    })
  const searchDeadline = underDeadline("search", "try more specific words.")
  const listDeadline = underDeadline("list", "retry in a moment.")

  return CatalogRepo.of({
    replaceCategories: bounded.replaceCategories,
    mergeCategories: bounded.mergeCategories,
    categoryExists: bounded.categoryExists,
    findHook: bounded.findHook,
    upsertHooks: bounded.upsertHooks,
    analyzeCatalog: bounded.analyzeCatalog,
    createImportStaging: bounded.createImportStaging,
    stageHooks: bounded.stageHooks,
    upsertStagedHooks: bounded.upsertStagedHooks,
    categories: bounded.categories(),
    catalogVersion: bounded.catalogVersion(),
    searchPage: (request) => searchDeadline(pages.searchPage(request)),
    listPage: (request) => listDeadline(pages.listPage(request)),
    neighbours: (lexemes, rows, bounds = neighbourBounds) => searchDeadline(pages.neighbours(lexemes, rows, bounds, config.searchWalkWindow))
  })
})

export class CatalogRepo extends Context.Service<CatalogRepo, CatalogRepoService>()("hookline/CatalogRepo") {
  /** Needs SqlClient and the catalog's configuration from outside. */
  static readonly layer = Layer.effect(CatalogRepo, make)
}
