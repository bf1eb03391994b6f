/**
 * The demo catalog: categories plus `count` deterministic, realistic hooks (DemoData.ts). Used on
 * the first embedded start, by the tests and by the benchmark. Seeding is an upsert keyed on the
 * derived ids, so running it again (or with a larger count) adds only what is missing.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { defaultDemoSeed, demoCategories, demoHook } from "./DemoData.js"
import { HookCatalog } from "./HookCatalog.js"
import type { HookRecord } from "./HookRecord.js"
import { CatalogRepo } from "./Repo.js"

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
 * Seeds a migrated database directly, for CLIs and the benchmark: multi-row
 * `INSERT … SELECT FROM unnest(…)` batches, two statements in flight so generating the next
 * batch overlaps writing the last one.
 */
export const seedDemoDatabase = (databaseUrl: string, count: number, options: SeedOptions = {}): Promise<void> => {
  const seed = options.seed ?? defaultDemoSeed
  const batchSize = options.batchSize ?? 5_000
  const batches = Array.from({ length: Math.ceil(count / batchSize) }, (_, i) => i * batchSize)
  let written = 0
  const seeding = Effect.gen(function*() {
    const repo = yield* CatalogRepo
    yield* repo.mergeCategories(demoCategories.map(({ slug, name }) => ({ slug, name })))
    yield* Effect.forEach(batches, (from) => {
      const to = Math.min(count, from + batchSize)
      return Effect.suspend(() => repo.upsertHooks(batchOf(from, to, seed))).pipe(
        Effect.andThen(Effect.sync(() => {
          written += to - from
          options.onProgress?.(written, count)
        }))
      )
    }, { concurrency: 2, discard: true })
    yield* repo.analyzeCatalog()
  })
  const database = PgClient.layer({ url: Redacted.make(databaseUrl), maxConnections: 2 })
  return Effect.runPromise(seeding.pipe(Effect.provide(CatalogRepo.layer.pipe(Layer.provide(database), Layer.provide(Reactivity.layer)))))
}
