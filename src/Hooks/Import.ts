/**
 * Streaming hook import: a JSON array of hooks, or NDJSON (one hook per line), read chunk by
 * chunk in constant memory whatever the size. Each record is validated against the HookRich
 * shape (id optional: derived from platform + source_url), valid ones are upserted in batches,
 * invalid ones are reported with their position:
 * - NDJSON: `index` is the 1-based line number (blank lines are skipped but counted);
 * - JSON array: `index` is the 0-based position of the element in the array.
 * The same function serves the admin route (the request body) and any CLI (a file).
 */
import { HttpServerRequest } from "@effect/platform"
import { Effect, Either, Option, Stream } from "effect"
import type { ImportResult } from "../Admin/Api.js"
import { ValidationFailed } from "../Errors.js"
import { HookCatalog } from "./HookCatalog.js"
import { type HookRecord, validateHookRecord } from "./HookRecord.js"

export type ImportFormat = "json" | "ndjson"

export interface ImportProgress {
  readonly bytes: number
  readonly records: number
  readonly inserted: number
  readonly updated: number
  readonly rejected: number
}

export interface ImportOptions {
  readonly format: ImportFormat
  /** Called after every batch written and once at the end. */
  readonly onProgress?: (progress: ImportProgress) => void
}

/** Rejections listed in the result; `rejected_count` has the total. */
export const maxReportedRejections = 1_000

/** A body that is not an array of hooks at all (nothing was imported). */
export class NotAHookArray extends Error {}

/** One record cut out of the stream: its position, and its text or why it could not be read. */
type Piece = { readonly index: number; readonly text: string } | { readonly index: number; readonly problem: string }

interface Splitter {
  /** Cuts records out of the next chunk. */
  readonly push: (chunk: Uint8Array) => Array<Piece>
  /** The records left when the stream ends. */
  readonly end: () => Array<Piece>
}

const utf8 = new TextDecoder("utf-8", { fatal: true })
const decode = (bytes: Uint8Array): string | null => {
  try {
    return utf8.decode(bytes)
  } catch {
    return null
  }
}

/** Concatenates byte slices collected for one record. */
const joined = (parts: Array<Uint8Array>, length: number) => {
  const out = new Uint8Array(length)
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.byteLength
  }
  return out
}

const tooLarge = (max: number) => `the record is larger than ${max} bytes`

/** NDJSON: records end at a newline; the index is the 1-based line number. */
const ndjsonSplitter = (maxBytes: number): Splitter => {
  let line = 1
  let parts: Array<Uint8Array> = []
  let length = 0
  let overflow = false
  const finish = (): Array<Piece> => {
    const index = line++
    const bytes = joined(parts, length)
    const wasOverflow = overflow
    parts = []
    length = 0
    overflow = false
    if (wasOverflow) return [{ index, problem: tooLarge(maxBytes) }]
    const text = decode(bytes)
    if (text === null) return [{ index, problem: "the line is not valid UTF-8" }]
    return text.trim() === "" ? [] : [{ index, text }]
  }
  return {
    push: (chunk) => {
      const pieces: Array<Piece> = []
      let from = 0
      for (;;) {
        const newline = chunk.indexOf(0x0a, from)
        const slice = chunk.subarray(from, newline === -1 ? chunk.byteLength : newline)
        if (!overflow) {
          if (length + slice.byteLength > maxBytes) {
            overflow = true
            parts = []
          } else if (slice.byteLength > 0) {
            parts.push(slice.slice())
          }
          length += slice.byteLength
        }
        if (newline === -1) return pieces
        pieces.push(...finish())
        from = newline + 1
      }
    },
    end: () => (length > 0 || overflow ? finish() : [])
  }
}

const isSpace = (byte: number) => byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09

/**
 * A JSON array: elements are cut at depth 1 by tracking strings and brackets only, so a broken
 * element is reported on its own and the rest of the array is still read. The index is the
 * element's 0-based position.
 */
const jsonArraySplitter = (maxBytes: number): Splitter => {
  type State = "start" | "value" | "after" | "done" | "trailing"
  let state: State = "start"
  let index = 0
  let depth = 0
  let inString = false
  let escaped = false
  let parts: Array<Uint8Array> = []
  let length = 0
  let overflow = false
  let bomChecked = false

  const take = (slice: Uint8Array) => {
    if (overflow) return
    if (length + slice.byteLength > maxBytes) {
      overflow = true
      parts = []
    } else {
      parts.push(slice.slice())
    }
    length += slice.byteLength
  }
  const finish = (): Piece => {
    const at = index++
    const bytes = joined(parts, length)
    const wasOverflow = overflow
    parts = []
    length = 0
    overflow = false
    if (wasOverflow) return { index: at, problem: tooLarge(maxBytes) }
    const text = decode(bytes)
    return text === null ? { index: at, problem: "the record is not valid UTF-8" } : { index: at, text }
  }

  return {
    push: (input) => {
      let chunk = input
      if (!bomChecked && chunk.byteLength > 0) {
        bomChecked = true
        if (chunk[0] === 0xef && chunk[1] === 0xbb && chunk[2] === 0xbf) chunk = chunk.subarray(3)
      }
      const pieces: Array<Piece> = []
      let valueStart = state === "value" ? 0 : -1
      for (let i = 0; i < chunk.byteLength; i++) {
        const byte = chunk[i]
        if (state === "value") {
          if (inString) {
            if (escaped) escaped = false
            else if (byte === 0x5c) escaped = true
            else if (byte === 0x22) inString = false
            continue
          }
          if (byte === 0x22) inString = true
          else if (byte === 0x7b || byte === 0x5b) depth++
          else if (byte === 0x7d || byte === 0x5d) {
            if (depth === 0) {
              // The array's own closing bracket ends a bare value.
              take(chunk.subarray(valueStart, i))
              pieces.push(finish())
              state = "done"
              continue
            }
            depth--
          } else if (byte === 0x2c && depth === 0) {
            take(chunk.subarray(valueStart, i))
            pieces.push(finish())
            state = "after"
            continue
          }
          continue
        }
        if (isSpace(byte)) continue
        if (state === "start") {
          if (byte !== 0x5b) throw new NotAHookArray("The body must be a JSON array of hooks, or NDJSON sent with Content-Type application/x-ndjson.")
          state = "after"
        } else if (state === "after") {
          if (byte === 0x5d) state = "done"
          else if (byte !== 0x2c) {
            state = "value"
            valueStart = i
            depth = 0
            inString = false
            escaped = false
            i-- // re-read this byte as the value's first
          }
        } else if (state === "done") {
          pieces.push({ index, problem: "unexpected data after the end of the JSON array (ignored)" })
          state = "trailing"
        }
      }
      if (state === "value") take(chunk.subarray(valueStart))
      return pieces
    },
    end: () => {
      if (state === "start") throw new NotAHookArray("The body is empty: send a JSON array of hooks.")
      if (state === "value") {
        const last = finish()
        return [
          "text" in last ? { index: last.index, problem: "the JSON array is not closed (the body ended inside this record)" } : last
        ]
      }
      if (state === "after") return [{ index, problem: "the JSON array is not closed" }]
      return []
    }
  }
}

/** A message for JSON.parse failures, without echoing the record. */
const parse = (text: string): Either.Either<unknown, string> => {
  try {
    return Either.right(JSON.parse(text))
  } catch (error) {
    return Either.left(`not valid JSON (${error instanceof Error ? error.message : "parse error"})`)
  }
}

/**
 * Imports hooks from a byte stream. Valid records are upserted in batches as they arrive
 * (a re-import updates, never duplicates); the result counts inserts and updates and lists
 * the first rejections with their positions.
 */
export const importHooks = <E, R>(input: Stream.Stream<Uint8Array, E, R>, options: ImportOptions) =>
  Effect.gen(function*() {
    const catalog = yield* HookCatalog
    const config = catalog.config
    const splitter = options.format === "ndjson"
      ? ndjsonSplitter(config.importMaxRecordBytes)
      : jsonArraySplitter(config.importMaxRecordBytes)
    const rejected: Array<{ index: number; message: string }> = []
    let rejectedCount = 0
    let batch: Array<HookRecord> = []
    let batchIds = new Set<string>()
    const totals = { bytes: 0, records: 0, inserted: 0, updated: 0 }

    const progress = () =>
      options.onProgress?.({ ...totals, rejected: rejectedCount })

    const flush = Effect.gen(function*() {
      if (batch.length === 0) return
      const written = yield* catalog.upsert(batch)
      totals.inserted += written.inserted
      totals.updated += written.updated
      batch = []
      batchIds = new Set()
      progress()
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
          const record = Either.flatMap(parse(piece.text), validateHookRecord)
          if (Either.isLeft(record)) {
            reject(piece.index, record.left)
            continue
          }
          // One statement cannot touch a row twice: a repeated id starts a new batch.
          if (batchIds.has(record.right.id)) yield* flush
          batch.push(record.right)
          batchIds.add(record.right.id)
          if (batch.length >= config.importBatchSize) yield* flush
        }
      })

    const split = (run: () => Array<Piece>) =>
      Effect.try({
        try: run,
        catch: (error) =>
          error instanceof NotAHookArray ? new ValidationFailed({ message: error.message }) : new ValidationFailed({ message: String(error) })
      })

    yield* Stream.runForEach(input, (chunk) =>
      Effect.gen(function*() {
        totals.bytes += chunk.byteLength
        yield* accept(yield* split(() => splitter.push(chunk)))
      }))
    yield* accept(yield* split(() => splitter.end()))
    yield* flush
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

/** POST /admin/catalog/hooks: the request body, streamed. */
export const importHooksFromRequest = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const format = formatOfContentType(request.headers["content-type"])
  if (Option.isNone(format)) {
    return yield* new ValidationFailed({
      message: "Content-Type must be application/json (a JSON array of hooks) or application/x-ndjson (one hook per line)."
    })
  }
  const body = request.stream.pipe(
    Stream.mapError(() => new ValidationFailed({ message: "The request body could not be read." }))
  )
  return yield* importHooks(body, { format: format.value })
})
