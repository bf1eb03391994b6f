/** The catalog's settings (environment variables, with the contract's values as defaults). */
import { Config, Duration } from "effect"
import { searchConcurrencySetting } from "../Config.js"

/** Page size of search and list (docs/behaviour.md, "Catalog search"). */
export const pageSize = 50

export const CatalogConfig = Config.all({
  /** A search that runs longer is cancelled in the database and answered 503 (nothing charged). */
  searchTimeout: Config.Duration("SEARCH_TIMEOUT").pipe(Config.withDefault(Duration.seconds(3))),
  /**
   * Sizes search's newest-first walks: a one- or two-word search walks at most five times as many
   * of the newest hooks (each walk only as far as its word's share of the catalog says it takes,
   * and only when that is cheaper than sorting the word's index matches), the substring fallback a
   * fifth of it; the similar-hooks query walks at most ten times as many for a line's common
   * words. Changes speed only, never results.
   */
  searchWalkWindow: Config.Int("SEARCH_WALK_WINDOW").pipe(Config.withDefault(10_000)),
  /** Catalog page queries one process runs in the database at once (src/Config.ts). */
  searchConcurrency: searchConcurrencySetting,
  /** First pages of search, and of list, kept in memory per process: up to this many each (0 turns the cache off). */
  cacheEntries: Config.Int("CATALOG_CACHE_ENTRIES").pipe(Config.withDefault(1_000)),
  /** Records staged per insert statement during an import (they reach the catalog together at its end). */
  importBatchSize: Config.Int("IMPORT_BATCH_SIZE").pipe(Config.withDefault(5_000)),
  /**
   * Largest import request body: a larger declared size is refused at once, a larger streamed
   * body when it passes the limit; either way with 413 and nothing written. Keep it under the
   * server's own request limit (300 MiB, src/App.ts). The CLI splits files into smaller requests.
   */
  importMaxBodyBytes: Config.Int("IMPORT_MAX_BODY_BYTES").pipe(Config.withDefault(256 * 1024 * 1024)),
  /** Largest single record (one NDJSON line or one array element) an import accepts. */
  importMaxRecordBytes: Config.Int("IMPORT_MAX_RECORD_BYTES").pipe(Config.withDefault(1024 * 1024))
})
export type CatalogConfig = Config.Success<typeof CatalogConfig>
