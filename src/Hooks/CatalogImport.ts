/**
 * What a bulk import (Import.ts) needs of the catalog, and nothing more: its limits and the
 * staging statements, which run in the import's own transaction.
 */
import { Context, Effect, Layer } from "effect"
import { CatalogConfig } from "./Config.js"
import type { HookRecord } from "./HookRecord.js"
import { CatalogRepo } from "./Repo.js"

export interface CatalogImportService {
  /** IMPORT_MAX_BODY_BYTES, IMPORT_MAX_RECORD_BYTES and IMPORT_BATCH_SIZE. */
  readonly limits: {
    readonly maxBodyBytes: number
    readonly maxRecordBytes: number
    readonly batchSize: number
  }
  /** Creates the transaction's staging table. */
  readonly createStaging: () => Effect.Effect<void>
  /** Stages a batch; `seq` is the position of its first record in the body (the last of an id wins). */
  readonly stage: (records: ReadonlyArray<HookRecord>, seq: number) => Effect.Effect<void>
  /** Writes every staged hook to the catalog in one upsert; how many were new. */
  readonly upsertStaged: () => Effect.Effect<number>
}

export class CatalogImport extends Context.Service<CatalogImport, CatalogImportService>()("hookline/CatalogImport") {
  /** Takes its CatalogRepo from the caller. */
  static readonly layerWithoutDependencies = Layer.effect(
    CatalogImport,
    Effect.gen(function*() {
      const repo = yield* CatalogRepo
      const config = yield* CatalogConfig
      return CatalogImport.of({
        limits: { maxBodyBytes: config.importMaxBodyBytes, maxRecordBytes: config.importMaxRecordBytes, batchSize: config.importBatchSize },
        createStaging: repo.createImportStaging,
        stage: repo.stageHooks,
        upsertStaged: repo.upsertStagedHooks
      })
    })
  )
  /** With its repository; needs SqlClient and the catalog's configuration from outside. */
  static readonly layer = CatalogImport.layerWithoutDependencies.pipe(Layer.provide(CatalogRepo.layer))
}
