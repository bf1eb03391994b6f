/**
 * Streaming hook import: a JSON array of hooks, or NDJSON (one hook per line), read chunk by
 * chunk in constant memory whatever the size. Each record is validated against the HookRich
 * shape (id optional: derived from platform + source_url), valid ones are staged in batches and
 * upserted together once the body is complete, invalid ones are reported with their position:
 * - NDJSON: `index` is the 1-based line number (blank lines are skipped but counted);
 * - JSON array: `index` is the 0-based position of the element in the array.
 * The same function serves the admin route (the request body) and any CLI (a file).
 */
import { Effect, Fiber, Option, Result, Stream } from "effect"
import { HttpServerRequest } from "effect/http"
import { SqlClient } from "effect/sql"
import type { ImportResult } from "./Api.js"
import { PayloadTooLarge, ValidationFailed } from "../Errors.js"
import { orDieOnDb, withoutSessionTimeouts } from "../Sql.js"
import { CatalogImport } from "./CatalogImport.js"
import { type HookRecord, validateHookRecord } from "./HookRecord.js"
import { type ImportFormat, isSpace, NotAHookArray, type Piece, splitterFor } from "./ImportSplitters.js"

export type { ImportFormat } from "./ImportSplitters.js"

export interface ImportProgress {
  readonly bytes: number
  readonly records: number
  /** Valid records staged so far. */
  readonly staged: number
  /** Known once the import has committed (0 until then). */
  readonly inserted: number
  readonly updated: number
  readonly rejected: number
}

export interface ImportOptions {
  readonly format: ImportFormat
  /** The most body bytes read before the import fails with 413 (default IMPORT_MAX_BODY_BYTES). */
  readonly maxBytes?: number
  /** Called after every batch staged and once at the end. */
  readonly onProgress?: (progress: ImportProgress) => void
}

/** Rejections listed in the result; `rejected_count` has the total. */
export const maxReportedRejections = 1_000

/** A message for JSON.parse failures, without echoing the record. */
const parse = (text: string): Result.Result<unknown, string> => {
  try {
    return Result.succeed(JSON.parse(text))
  } catch (error) {
    return Result.fail(`not valid JSON (${error instanceof Error ? error.message : "parse error"})`)
  }
}

/** Splits, turning only "this is not an import body" into a 422: any other throw is a bug (a 500). */
const split = (run: () => Array<Piece>) =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(run())
    } catch (error) {
      return error instanceof NotAHookArray ? Effect.fail(new ValidationFailed({ message: error.message })) : Effect.die(error)
    }
  })

/**
 * Stages batches in the import's transaction (in its scope) with one statement in flight while the
 * next batch is parsed and validated, so the database and this process work at the same time;
 * `staged` waits for the last one. `onStaged` hears of each batch once it is in.
 */
const stagingPipeline = (stageHooks: (records: ReadonlyArray<HookRecord>, seq: number) => Effect.Effect<void>, onStaged: (count: number) => void) => {
  let inFlight: Fiber.Fiber<void> | null = null
  let queued = 0
  const staged = Effect.suspend(() => (inFlight === null ? Effect.void : Fiber.join(inFlight)))
  const stage = (records: ReadonlyArray<HookRecord>) =>
    Effect.gen(function*() {
      const seq = queued
      queued += records.length
      const write = stageHooks(records, seq)
      yield* staged
      inFlight = yield* Effect.forkScoped(Effect.andThen(write, Effect.sync(() => onStaged(records.length))))
    })
  return { stage, staged }
}

const bodyTooLarge = (maxBytes: number) =>
  new PayloadTooLarge({
    message: `The import body is larger than ${maxBytes} bytes (IMPORT_MAX_BODY_BYTES); nothing was imported. ` +
      "Send it in parts: `npm run admin -- catalog import FILE` splits a file into requests under the limit."
  })

/**
 * Imports hooks from a byte stream in one transaction: valid records are staged as they arrive,
 * then written to the catalog by one upsert when the body has been read in full (a re-import
 * updates, never duplicates). A body that breaks off or outgrows the limit writes nothing. The
 * result counts inserts and updates and lists the first rejections with their positions.
 */
export const importHooks = <E, R>(input: Stream.Stream<Uint8Array, E, R>, options: ImportOptions) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const catalog = yield* CatalogImport
    const maxBytes = options.maxBytes ?? catalog.limits.maxBodyBytes
    const splitter = splitterFor(options.format, catalog.limits.maxRecordBytes)
    const rejected: Array<{ index: number; message: string }> = []
    let rejectedCount = 0
    let batch: Array<HookRecord> = []
    const totals = { bytes: 0, records: 0, staged: 0, inserted: 0, updated: 0 }

    const progress = () => options.onProgress?.({ ...totals, rejected: rejectedCount })

    const pipeline = stagingPipeline(catalog.stage, (count) => {
      totals.staged += count
      progress()
    })
    const stage = Effect.suspend(() => {
      const records = batch
      batch = []
      return records.length === 0 ? Effect.void : pipeline.stage(records)
    })

    const reject = (index: number, message: string) => {
      rejectedCount++
      if (rejected.length < maxReportedRejections) rejected.push({ index, message })
    }

    const accept = (pieces: Array<Piece>) =>
      Effect.gen(function*() {
        for (const piece of pieces) {
          totals.records++
          if ("problem" in piece) {
            reject(piece.index, piece.problem)
            continue
          }
          const record = Result.flatMap(parse(piece.text), validateHookRecord)
          if (Result.isFailure(record)) {
            reject(piece.index, record.failure)
            continue
          }
          batch.push(record.success)
          if (batch.length >= catalog.limits.batchSize) yield* stage
        }
      })

    yield* Effect.gen(function*() {
      // One import may take minutes at scale, and waits for its upload's bytes inside its transaction:
      // it is an admin's, not bounded like a tenant's query.
      yield* withoutSessionTimeouts
      yield* catalog.createStaging()
      yield* Stream.runForEach(input, (chunk) =>
        Effect.gen(function*() {
          totals.bytes += chunk.byteLength
          if (totals.bytes > maxBytes) return yield* bodyTooLarge(maxBytes)
          yield* accept(yield* split(() => splitter.push(chunk)))
        }))
      yield* accept(yield* split(() => splitter.end()))
      yield* stage
      yield* pipeline.staged
      if (totals.staged === 0) return
      totals.inserted = yield* catalog.upsertStaged()
      totals.updated = totals.staged - totals.inserted
    }).pipe(Effect.scoped, sql.withTransaction, orDieOnDb)
    progress()
    return {
      object: "import_result",
      inserted: totals.inserted,
      updated: totals.updated,
      rejected_count: rejectedCount,
      rejected
    } satisfies ImportResult
  })

/** The import format a Content-Type names; None when it names neither. */
export const formatOfContentType = (contentType: string | undefined): Option.Option<ImportFormat> => {
  const mediaType = (contentType ?? "application/json").split(";")[0].trim().toLowerCase()
  if (mediaType === "application/json" || mediaType === "") return Option.some("json")
  if (["application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"].includes(mediaType)) {
    return Option.some("ndjson")
  }
  return Option.none()
}

/** The import format of a file, by its extension, else by its first non-blank byte. */
export const formatOfFile = (path: string, firstBytes: Uint8Array): ImportFormat => {
  if (/\.(ndjson|jsonl)$/i.test(path)) return "ndjson"
  if (/\.json$/i.test(path)) return "json"
  const first = firstBytes.find((byte) => !isSpace(byte) && byte !== 0xef && byte !== 0xbb && byte !== 0xbf)
  return first === 0x5b ? "json" : "ndjson"
}

/** Imports a file from disk, streamed (for CLIs and the benchmark). */
export const importHooksFromFile = (path: string, options: { readonly onProgress?: (progress: ImportProgress) => void } = {}) =>
  Effect.gen(function*() {
    const file = Bun.file(path)
    const head = new Uint8Array(yield* Effect.promise(() => file.slice(0, 64).arrayBuffer()))
    const stream = Stream.fromReadableStream({
      evaluate: () => file.stream(),
      onError: (cause) => new ValidationFailed({ message: `Could not read ${path}: ${String(cause)}` })
    })
    return yield* importHooks(stream, { format: formatOfFile(path, head), onProgress: options.onProgress })
  })

/** POST /admin/catalog/hooks: the request body, streamed; a declared size over the limit is refused before reading. */
export const importHooksFromRequest = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const { maxBodyBytes } = (yield* CatalogImport).limits
  const declared = request.headers["content-length"]
  if (declared !== undefined && Number(declared) > maxBodyBytes) return yield* bodyTooLarge(maxBodyBytes)
  const format = formatOfContentType(request.headers["content-type"])
  if (Option.isNone(format)) {
    return yield* new ValidationFailed({
      message: "Content-Type must be application/json (a JSON array of hooks) or application/x-ndjson (one hook per line)."
    })
  }
  const body = request.stream.pipe(
    Stream.mapError(() => new ValidationFailed({ message: "The request body could not be read." }))
  )
  return yield* importHooks(body, { format: format.value, maxBytes: maxBodyBytes })
})
