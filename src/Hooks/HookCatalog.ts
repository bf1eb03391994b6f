/**
 * The hook catalog: categories, ranked search, category lists, single hooks and batch upserts,
 * with the first pages of search and list cached per catalog version. Statements run in the
 * catalog's repository (Repo.ts); the search structures they read are described in
 * migrations/0002_catalog_search.ts.
 */
import { Cache, Context, Duration, Effect, Exit, Layer, Option, Schema } from "effect"
import { Secrets } from "../Config.js"
import { readCursor, signCursor } from "../Cursor.js"
import { InvalidCursor, NotFound, ServiceUnavailable, ValidationFailed } from "../Errors.js"
import { idPattern } from "../Ids.js"
import { chargedAtOnce, metered } from "../Ledger/Metering.js"
import { hookPrice, pageCost, pagePrice } from "../Ledger/Prices.js"
import type { HookCategory, HookCategoryList, HookLean, HookList, HookRich, ListParams, SearchParams } from "./Api.js"
import { topSortMs } from "./CatalogSql.js"
import { CatalogConfig, pageSize } from "./Config.js"
import type { HookRecord } from "./HookRecord.js"
import { CatalogRepo, type LeanRow, type RichRow } from "./Repo.js"

/** Where the next search page starts: the last row's (k1, sort_ms, id); see hook_search_page. */
export const SearchPosition = Schema.Tuple([Schema.NullOr(Schema.Number), Schema.Int, Schema.String])
export type SearchPosition = typeof SearchPosition.Type

/** Where the next list page starts: the last row's (sort_ms, id). */
export const ListPosition = Schema.Tuple([Schema.Int, Schema.String])
export type ListPosition = typeof ListPosition.Type

/** What a catalog cursor is bound to: its endpoint and the normalised query or the category. */
export const cursorBinding = (endpoint: "search" | "list", queryOrCategory: string) => `hooks.${endpoint}\0${queryOrCategory}`

export const toLean = (row: LeanRow): HookLean => ({
  id: row.id,
  text: row.text,
  platform: row.platform,
  media_type: row.media_type,
  thumbnail_url: row.thumbnail_url,
  category: row.category,
  hook_duration_sec: row.hook_duration_sec,
  published_at: row.published_at === null ? null : row.published_at.toISOString()
})

/** The JSON columns were written by import, through HookImportRecord; the success schema checks them again. */
const toRich = (row: RichRow): HookRich => ({
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

/** One page, and where the next one starts (None on the last page). */
export interface Page<P> {
  readonly data: ReadonlyArray<HookLean>
  readonly next: Option.Option<P>
}

/**
 * `lookup` through an Effect `Cache` of at most `capacity` entries, the least recently used
 * evicted first (0 turns it off). A failed lookup is not kept: the next call asks again.
 */
const cachedLookup = <K, A, E>(capacity: number, lookup: (key: K) => Effect.Effect<A, E>) =>
  capacity <= 0
    ? Effect.succeed(lookup)
    : Effect.map(
      Cache.makeWith(lookup, { capacity, timeToLive: (exit) => (Exit.isSuccess(exit) ? Duration.infinity : Duration.zero) }),
      (cache) => (key: K) => Cache.get(cache, key)
    )

/** Text of the user's query as the catalog matches it: trimmed, single spaces, lowercase. */
export const normaliseQuery = (q: string): string => q.trim().replace(/\s+/g, " ").toLowerCase()

/** One page of rows (pageSize + 1 were asked for: one more means a next page, starting after the last shown). */
const toPage = <R extends LeanRow, P>(rows: ReadonlyArray<R>, position: (row: R) => P): Page<P> => {
  const data = rows.slice(0, pageSize)
  return {
    data: data.map(toLean),
    next: rows.length > pageSize ? Option.some(position(data[data.length - 1])) : Option.none()
  }
}

/**
 * Pages of a search or a list, the first ones cached by catalog version and subject (a normalised
 * query or a category): any import bumps the version, so an older catalog's page is never served.
 */
const firstPagesCached = <P, E>(
  catalogVersion: Effect.Effect<number>,
  entries: number,
  load: (subject: string, after: Option.Option<P>) => Effect.Effect<Page<P>, E>
) =>
  Effect.map(
    cachedLookup(entries, ([, subject]: readonly [version: number, subject: string]) => load(subject, Option.none())),
    (firstPage) => (subject: string, after: Option.Option<P>) =>
      Option.isNone(after) ? Effect.flatMap(catalogVersion, (version) => firstPage([version, subject])) : load(subject, after)
  )

const hookId = idPattern("hook")

/**
 * The catalog's paid requests. Every check that can reject one (blank query, unknown category,
 * bad cursor, malformed id) runs before any credit is taken, so an invalid request is never
 * charged; a page is then metered at its price, a hook charged at once once it is found.
 */
const pricedRequests = <E>(
  cursorSecret: Secrets["Service"]["cursorSecret"],
  pages: {
    readonly search: (normalised: string, after: Option.Option<SearchPosition>) => Effect.Effect<Page<SearchPosition>, E>
    readonly list: (category: string, after: Option.Option<ListPosition>) => Effect.Effect<Page<ListPosition>, E>
    readonly categoryExists: (category: string) => Effect.Effect<boolean>
    readonly hook: (id: string) => Effect.Effect<Option.Option<HookRich>>
  }
) => {
  /** A page as the contract lists it, its next cursor signed for the same endpoint and query. */
  const respond = <P>(binding: string, page: Page<P>) => ({
    object: "list" as const,
    data: page.data,
    has_more: Option.isSome(page.next),
    next_cursor: Option.match(page.next, { onNone: () => null, onSome: (next) => signCursor(cursorSecret, binding, next) })
  })

  const pricedPage = <P>(operation: "search" | "list", binding: string, run: Effect.Effect<Page<P>, E>) =>
    metered({ operation, reserve: pagePrice.reserve, run: () => run, cost: (page) => pageCost(page.data.length) }).pipe(
      Effect.map((page) => respond(binding, page))
    )

  const searchRequest = (params: typeof SearchParams.Type) =>
    Effect.gen(function*() {
      const query = normaliseQuery(params.q)
      if (query === "") return yield* new ValidationFailed({ message: "q: must contain a non-blank character" })
      const binding = cursorBinding("search", query)
      const after = yield* readCursor(cursorSecret, binding, params.cursor, SearchPosition)
      return yield* pricedPage("search", binding, pages.search(query, after))
    })

  const listRequest = (params: typeof ListParams.Type) =>
    Effect.gen(function*() {
      const binding = cursorBinding("list", params.category)
      const after = yield* readCursor(cursorSecret, binding, params.cursor, ListPosition)
      if (!(yield* pages.categoryExists(params.category))) {
        return yield* new ValidationFailed({
          message: `category: unknown slug ${JSON.stringify(params.category)}; GET /v1/hooks/categories lists the valid ones`
        })
      }
      return yield* pricedPage("list", binding, pages.list(params.category, after))
    })

  const hookRequest = (id: string) =>
    Effect.gen(function*() {
      const notFound = new NotFound({ message: `No hook ${JSON.stringify(id)}.` })
      if (!hookId.test(id)) return yield* notFound
      const hook = yield* pages.hook(id)
      if (Option.isNone(hook)) return yield* notFound
      // The hook is found before anything is taken: an unknown id costs nothing.
      yield* chargedAtOnce({ operation: "hook", amount: hookPrice, referenceId: id })
      return hook.value
    })

  return { searchRequest, listRequest, hookRequest }
}

/** A paid request: what charging it can answer and needs (Ledger/Metering.ts: the caller, the Ledger, the request), besides its own. */
type Charged<A, E> = Effect.Effect<
  A,
  E | Effect.Error<ReturnType<typeof chargedAtOnce>>,
  Effect.Services<ReturnType<typeof chargedAtOnce>>
>

/** What the catalog offers: the paid requests as the API answers them, and the reads and writes under them. */
export interface HookCatalogService {
  /** A search page as the API answers it, metered at its price; a blank query or a bad cursor is refused before any charge. */
  readonly searchRequest: (params: typeof SearchParams.Type) => Charged<HookList, ValidationFailed | InvalidCursor | ServiceUnavailable>
  /** A category's page, metered; an unknown category or a bad cursor is refused before any charge. */
  readonly listRequest: (params: typeof ListParams.Type) => Charged<HookList, ValidationFailed | InvalidCursor | ServiceUnavailable>
  /** One hook, charged once it is found; an unknown or malformed id costs nothing. */
  readonly hookRequest: (id: string) => Charged<HookRich, NotFound>
  readonly categories: Effect.Effect<typeof HookCategoryList.Type>
  /** Replaces the category list (hooks keep their category slug even when it is removed). */
  readonly putCategories: (input: ReadonlyArray<HookCategory>) => Effect.Effect<typeof HookCategoryList.Type>
  /** One page of search results for a normalised query (normaliseQuery), after a position or from the start. */
  readonly search: (normalised: string, after: Option.Option<SearchPosition>) => Effect.Effect<Page<SearchPosition>, ServiceUnavailable>
  /** One page of a category's hooks, newest first. */
  readonly list: (category: string, after: Option.Option<ListPosition>) => Effect.Effect<Page<ListPosition>, ServiceUnavailable>
  readonly hook: (id: string) => Effect.Effect<Option.Option<HookRich>>
  /** Inserts or updates hooks in one statement; a batch must not repeat an id. */
  readonly upsert: (records: ReadonlyArray<HookRecord>) => Effect.Effect<{ readonly inserted: number; readonly updated: number }>
  /** The hooks nearest to a line's lexemes, nearest first (NeighbourRule.ts). */
  readonly neighbours: CatalogRepo["Service"]["neighbours"]
}

const make = Effect.gen(function*() {
  const repo = yield* CatalogRepo
  const config = yield* CatalogConfig
  const { cursorSecret } = yield* Secrets

  const categories = Effect.map(repo.categories, (data) => ({
    object: "list" as const,
    data,
    has_more: false,
    next_cursor: null
  }))

  const putCategories = (input: ReadonlyArray<HookCategory>) => Effect.andThen(repo.replaceCategories(input), categories)

  /**
   * One page of search results: ranked full-text matches, or the substring fallback for a query
   * with no searchable word (the repository's page decides, in the same statement).
   */
  const search = yield* firstPagesCached(repo.catalogVersion, config.cacheEntries, (normalised, after: Option.Option<SearchPosition>) =>
    repo.searchPage({
      query: normalised,
      after: Option.getOrElse(after, () => [null, null, null] as const),
      rows: pageSize + 1,
      walkWindow: config.searchWalkWindow
    }).pipe(Effect.map((rows) => toPage(rows, (row): SearchPosition => [row.k1, row.k2, row.id]))))

  /** One page of a category's hooks, newest first. */
  const list = yield* firstPagesCached(repo.catalogVersion, config.cacheEntries, (category, after: Option.Option<ListPosition>) =>
    repo.listPage({ category, after: Option.getOrElse(after, () => [topSortMs, ""] as const), rows: pageSize + 1 }).pipe(
      Effect.map((rows) => toPage(rows, (row): ListPosition => [row.k2, row.id]))
    ))

  const hook = (id: string) => Effect.map(repo.findHook(id), Option.map(toRich))

  return HookCatalog.of({
    categories,
    putCategories,
    search,
    list,
    hook,
    upsert: repo.upsertHooks,
    neighbours: repo.neighbours,
    ...pricedRequests(cursorSecret, { search, list, categoryExists: repo.categoryExists, hook })
  })
})

export class HookCatalog extends Context.Service<HookCatalog, HookCatalogService>()("hookline/HookCatalog") {
  /** Takes its CatalogRepo from the caller (a fake one in a test). */
  static readonly layerWithoutDependencies = Layer.effect(HookCatalog, make).pipe(Layer.provide(Secrets.layer))
  /** With its repository; needs SqlClient and the catalog's configuration from outside. */
  static readonly layer = HookCatalog.layerWithoutDependencies.pipe(Layer.provide(CatalogRepo.layer))
}
