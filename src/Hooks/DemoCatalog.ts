/**
 * The demo catalog: categories plus `count` deterministic, realistic hooks (DemoData.ts). Used on
 * the first embedded start, by the tests and by the benchmark. Seeding is an upsert keyed on the
 * derived ids, so running it again (or with a larger count) adds only what is missing.
 */
import { Effect } from "effect"
import Pg from "pg"
import { upsertHooksParams, upsertHooksSql } from "./CatalogSql.js"
import { defaultDemoSeed, demoCategories, demoHook } from "./DemoData.js"
import { HookCatalog } from "./HookCatalog.js"
import type { HookRecord } from "./HookRecord.js"

export interface SeedOptions {
  readonly seed?: number
  /** Hooks per insert statement. */
  readonly batchSize?: number
  readonly onProgress?: (written: number, total: number) => void
}

const batchOf = (from: number, to: number, seed: number): Array<HookRecord> => {
  const batch: Array<HookRecord> = []
  for (let index = from; index < to; index++) batch.push(demoHook(index, seed))
  return batch
}

/** Puts the demo categories and upserts demo hooks 0 … count-1 (through the running server's catalog). */
export const seedDemoCatalog = (count: number, options: SeedOptions = {}) =>
  Effect.gen(function*() {
    const catalog = yield* HookCatalog
    const seed = options.seed ?? defaultDemoSeed
    const batchSize = options.batchSize ?? 2_000
    yield* catalog.putCategories(demoCategories.map(({ slug, name }) => ({ slug, name })))
    for (let from = 0; from < count; from += batchSize) {
      const to = Math.min(count, from + batchSize)
      yield* catalog.upsert(batchOf(from, to, seed))
      options.onProgress?.(to, count)
    }
    yield* Effect.logInfo("demo catalog seeded").pipe(Effect.annotateLogs({ hooks: count, categories: demoCategories.length }))
  })

/**
 * Seeds a migrated database directly through `pg`, for CLIs and the benchmark: multi-row
 * `INSERT … SELECT FROM unnest(…)` batches, two statements in flight so generating the next
 * batch overlaps writing the last one.
 */
export const seedDemoDatabase = async (databaseUrl: string, count: number, options: SeedOptions = {}) => {
  const seed = options.seed ?? defaultDemoSeed
  const batchSize = options.batchSize ?? 5_000
  const pool = new Pg.Pool({ connectionString: databaseUrl, max: 2 })
  try {
    await pool.query(
      `INSERT INTO categories (slug, name) SELECT * FROM unnest($1::text[], $2::text[])
       ON CONFLICT (slug) DO UPDATE SET name = EXCLUDED.name`,
      [demoCategories.map((c) => c.slug), demoCategories.map((c) => c.name)]
    )
    let written = 0
    const inFlight = new Set<Promise<void>>()
    for (let from = 0; from < count; from += batchSize) {
      const to = Math.min(count, from + batchSize)
      const write: Promise<void> = pool.query(upsertHooksSql, upsertHooksParams(batchOf(from, to, seed))).then(() => {
        written += to - from
        options.onProgress?.(written, count)
        inFlight.delete(write)
      })
      inFlight.add(write)
      if (inFlight.size >= 2) await Promise.race(inFlight)
    }
    await Promise.all(inFlight)
    await pool.query("ANALYZE hooks; ANALYZE hook_search; ANALYZE hook_search_repeats")
  } finally {
    await pool.end()
  }
}
