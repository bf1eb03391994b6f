/**
 * The hook catalog over Postgres: categories, ranked search, category lists, single hooks and
 * batch upserts. Read statements live in CatalogSql.ts (shared with the benchmark baseline); the
 * search structures they read are described in migrations/0002_catalog_search.ts.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Option, type ParseResult, Schema } from "effect"
import { ServiceUnavailable } from "../Errors.js"
import { lruCache } from "../LruCache.js"
import { orDieOnDb, StatementRunner } from "../Sql.js"
import { type HookCategory, HookLean, type HookRich } from "./Api.js"
import {
  catalogVersionSql,
  categoryExistsSql,
  hasSearchableWordSql,
  hookSql,
  listPageSql,
  searchPageSql,
  substringPageSql,
  topSortMs,
  upsertHooksParams,
  upsertHooksSql
} from "./CatalogSql.js"
import { CatalogConfig, pageSize } from "./Config.js"
import type { HookRecord } from "./HookRecord.js"

/** Where the next search page starts: the last row's (k1, sort_ms, id); see hook_search_page. */
export const SearchPosition = Schema.Tuple(Schema.NullOr(Schema.Number), Schema.Int, Schema.String)
export type SearchPosition = typeof SearchPosition.Type

/** Where the next list page starts: the last row's (sort_ms, id). */
export const ListPosition = Schema.Tuple(Schema.Int, Schema.String)
export type ListPosition = typeof ListPosition.Type

/** What a catalog cursor is bound to: its endpoint and the normalised query or the category. */
export const cursorBinding = (endpoint: "search" | "list", queryOrCategory: string) => `hooks.${endpoint}\0${queryOrCategory}`

/** A HookLean as the database returns it: published_at is a Date there, not an ISO string. */
const LeanRow = Schema.Struct({ ...HookLean.fields, published_at: Schema.NullOr(Schema.DateFromSelf) })

const SearchRow = Schema.Struct({ ...LeanRow.fields, k1: Schema.NullOr(Schema.Number), k2: Schema.Number })
const ListRow = Schema.Struct({ ...LeanRow.fields, k2: Schema.Number })

const RichRow = Schema.Struct({
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

type RowsDecoder<A> = (rows: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<A>, ParseResult.ParseError>
/** Decoders built once (building a schema per query would cost more than the decoding). */
const rowsOf = <A, I>(schema: Schema.Schema<A, I>): RowsDecoder<A> => Schema.decodeUnknown(Schema.Array(schema))
/**
 * Page rows skip schema decoding: their columns and types are fixed by searchPageSql and
 * listPageSql (text, float8, timestamptz → Date, int8 → number), and decoding 51 rows per
 * request cost more CPU than the rest of the page's work. The decoder still checks the shape
 * of the first row, so a schema drift fails loudly instead of answering wrong data.
 */
const pageRows = <A extends { readonly id: string }, I>(schema: Schema.Schema<A, I>): RowsDecoder<A> => {
  const checkOne = Schema.decodeUnknown(schema)
  return (rows) =>
    rows.length === 0 ? Effect.succeed([]) : Effect.as(checkOne(rows[0]), rows as ReadonlyArray<A>)
}
const decodeSearchRows = pageRows(SearchRow)
const searchAdvice = "try more specific words."
const decodeListRows = pageRows(ListRow)
const decodeRichRows = rowsOf(RichRow)
const decodeFound = rowsOf(Schema.Struct({ found: Schema.Boolean }))
const decodeSearchable = rowsOf(Schema.Struct({ searchable: Schema.Boolean }))
const decodeVersion = rowsOf(Schema.Struct({ version: Schema.Number }))
const decodeInserted = rowsOf(Schema.Struct({ inserted: Schema.Boolean }))

const toLean = (row: typeof LeanRow.Type): HookLean => ({
  id: row.id,
  text: row.text,
  platform: row.platform,
  media_type: row.media_type,
  thumbnail_url: row.thumbnail_url,
  category: row.category,
  hook_duration_sec: row.hook_duration_sec,
  published_at: row.published_at === null ? null : row.published_at.toISOString()
})

/** One page, and where the next one starts (None on the last page). */
export interface Page<P> {
  readonly data: ReadonlyArray<HookLean>
  readonly next: Option.Option<P>
}

/** Text of the user's query as the catalog matches it: trimmed, single spaces, lowercase. */
export const normaliseQuery = (q: string): string => q.trim().replace(/\s+/g, " ").toLowerCase()

/** A full hook from its row. */
const richOf = (row: typeof RichRow.Type): HookRich => ({
  ...toLean(row),
  source_url: row.source_url,
  caption: row.caption,
  duration_sec: row.duration_sec,
  summary: row.summary,
  emotions: row.emotions as HookRich["emotions"],
  comment_themes: row.comment_themes as HookRich["comment_themes"],
  metrics: row.metrics ?? null,
  creator: row.creator ?? null,
  audio: row.audio ?? null
})

/** The first pageSize rows as a page, with the position after the last one when more follow. */
const toPage = <R extends typeof LeanRow.Type, P>(rows: ReadonlyArray<R>, position: (row: R) => P): Page<P> => {
  const data = rows.slice(0, pageSize)
  return {
    data: data.map(toLean),
    next: rows.length > pageSize ? Option.some(position(data[data.length - 1])) : Option.none()
  }
}

/** A statement run by text and parameters, its rows decoded. */
type Query = <A>(
  decode: RowsDecoder<A>,
  text: string,
  params: ReadonlyArray<unknown>
) => Effect.Effect<ReadonlyArray<A>, SqlError | ParseResult.ParseError>

/** The category list: read, replaced, one looked up. */
const categoryStatements = (sql: SqlClient.SqlClient, query: Query) => {
  const categories = sql<HookCategory>`SELECT slug, name FROM categories ORDER BY name, slug`.pipe(
    Effect.map((rows) => ({
      object: "list" as const,
      data: rows.map(({ slug, name }) => ({ slug, name })),
      has_more: false,
      next_cursor: null
    })),
    orDieOnDb
  )

  /** Replaces the category list (hooks keep their category slug even when it is removed). */
  const putCategories = (input: ReadonlyArray<HookCategory>) =>
    Effect.gen(function*() {
      yield* sql`DELETE FROM categories`
      if (input.length > 0) {
        const unique = [...new Map(input.map((c) => [c.slug, c])).values()]
        yield* sql`INSERT INTO categories ${sql.insert(unique.map(({ slug, name }) => ({ slug, name })))}`
      }
    }).pipe(sql.withTransaction, orDieOnDb, Effect.zipRight(categories))

  const categoryExists = (slug: string) =>
    query(decodeFound, categoryExistsSql, [slug]).pipe(
      Effect.map((rows) => rows[0]?.found === true),
      orDieOnDb
    )

  return { categories, putCategories, categoryExists } as const
}

/** Serves first pages from a cache of `entries` pages while the catalog version is unchanged. */
const firstPageCache = (entries: number, catalogVersion: Effect.Effect<number>) => {
  const firstPages = lruCache<{ readonly version: number; readonly page: Page<unknown> }>(entries)
  return <P, E>(key: string, isFirst: boolean, load: Effect.Effect<Page<P>, E>): Effect.Effect<Page<P>, E> =>
    isFirst && entries > 0
      ? Effect.gen(function*() {
        const version = yield* catalogVersion
        const hit = firstPages.get(key)
        if (hit !== undefined && hit.version === version) return hit.page as Page<P>
        const page = yield* load
        firstPages.set(key, { version, page })
        return page
      })
      : load
}

/** Whether a normalised query has a searchable word; it depends on the query alone, so answers are kept. */
const searchableWordCheck = (entries: number, query: Query) => {
  const known = lruCache<boolean>(entries)
  return (normalised: string) => {
    const answer = known.get(normalised)
    return answer !== undefined
      ? Effect.succeed(answer)
      : query(decodeSearchable, hasSearchableWordSql, [normalised]).pipe(
        Effect.map((rows) => rows[0]?.searchable === true),
        Effect.tap((searchable) => known.set(normalised, searchable))
      )
  }
}

/** A search page's parameters: after a ranked position (k1, k2, id), or a substring one (k2, id). */
const searchParams = (
  normalised: string,
  searchable: boolean,
  after: Option.Option<SearchPosition>,
  walkWindow: number
): ReadonlyArray<unknown> =>
  searchable
    ? Option.match(after, {
      onNone: () => [normalised, null, null, null, pageSize + 1, walkWindow],
      onSome: ([k1, k2, id]) => [normalised, k1, k2, id, pageSize + 1, walkWindow]
    })
    : Option.match(after, {
      onNone: () => [normalised, null, null, pageSize + 1, walkWindow],
      onSome: ([, k2, id]) => [normalised, k2, id, pageSize + 1, walkWindow]
    })

export class HookCatalog extends Effect.Service<HookCatalog>()("hookline/HookCatalog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const run = yield* StatementRunner
    const config = yield* CatalogConfig

    const query: Query = (decode, text, params) => run(sql.unsafe(text, params as Array<unknown>)).pipe(Effect.flatMap(decode))

    /** A page query under SEARCH_TIMEOUT: past it the query is cancelled and the caller gets a 503 (nothing charged). */
    const pageQuery = <A>(decode: RowsDecoder<A>, text: string, params: ReadonlyArray<unknown>, what: string, advice: string) =>
      run(sql.unsafe(text, params as Array<unknown>), {
        duration: config.searchTimeout,
        onTimeout: () => new ServiceUnavailable({ message: `The ${what} took longer than ${Duration.format(config.searchTimeout)}; ${advice}` })
      }).pipe(Effect.flatMap(decode))

    const catalogVersion = query(decodeVersion, catalogVersionSql, []).pipe(
      Effect.map((rows) => rows[0]?.version ?? 0),
      orDieOnDb
    )
    const cachedFirstPage = firstPageCache(config.cacheEntries, catalogVersion)
    const hasSearchableWord = searchableWordCheck(config.cacheEntries, query)
    const { categories, categoryExists, putCategories } = categoryStatements(sql, query)

    /**
     * The rows of one search page: ranked full-text matches, or for a query with no searchable
     * word the substring fallback, bounded by its trigram index (hook_substring_page).
     */
    const searchRows = (normalised: string, after: Option.Option<SearchPosition>) =>
      Effect.flatMap(hasSearchableWord(normalised), (searchable) =>
        pageQuery(
          decodeSearchRows,
          searchable ? searchPageSql : substringPageSql,
          searchParams(normalised, searchable, after, config.searchWalkWindow),
          "search",
          searchAdvice
        ))

    /** One page of search results for a normalised query with a searchable or substring match. */
    const search = (normalised: string, after: Option.Option<SearchPosition>) =>
      cachedFirstPage(
        `search\0${normalised}`,
        Option.isNone(after),
        searchRows(normalised, after).pipe(
          Effect.map((rows) => toPage(rows, (row): SearchPosition => [row.k1, row.k2, row.id])),
          orDieOnDb
        )
      )

    /** One page of a category's hooks, newest first. */
    const list = (category: string, after: Option.Option<ListPosition>) =>
      cachedFirstPage(
        `list\0${category}`,
        Option.isNone(after),
        pageQuery(decodeListRows, listPageSql, Option.match(after, {
          onNone: () => [category, topSortMs, "", pageSize + 1],
          onSome: ([k2, id]) => [category, k2, id, pageSize + 1]
        }), "list", "retry in a moment.").pipe(
          Effect.map((rows) => toPage(rows, (row): ListPosition => [row.k2, row.id])),
          orDieOnDb
        )
      )

    const hook = (id: string) =>
      query(decodeRichRows, hookSql, [id]).pipe(Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), richOf)), orDieOnDb)

    /** Inserts or updates hooks in one statement; a batch must not repeat an id. */
    const upsert = (records: ReadonlyArray<HookRecord>) =>
      Effect.gen(function*() {
        if (records.length === 0) return { inserted: 0, updated: 0 }
        const rows = yield* query(decodeInserted, upsertHooksSql, upsertHooksParams(records))
        const inserted = rows.filter((row) => row.inserted).length
        return { inserted, updated: rows.length - inserted }
      }).pipe(orDieOnDb)

    return { config, categories, putCategories, categoryExists, catalogVersion, search, list, hook, upsert } as const
  })
}) {}
