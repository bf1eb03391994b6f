/**
 * `npm run admin -- catalog import FILE` and `catalog seed-demo`: NDJSON of any size, sent to the
 * import route as a sequence of requests, each under the route's body limit and cut at line
 * boundaries. Each request is one transaction on the server (all of its hooks, or none), and the
 * import is an upsert by id, so:
 * - a failed request is retried (a retry of a request that did commit only updates the same hooks);
 * - when retries run out the command stops and prints the line to resume from (`--from-line N`):
 *   every line before N is in the catalog, none from N on was written by the failed request.
 * Rejected records are reported with their line number in the file. A JSON array file is sent as
 * one streamed request (convert it to NDJSON to import it in parts).
 */
import { Effect } from "effect"
import { demoHook } from "../Hooks/DemoData.js"
import { formatOfFile, maxReportedRejections } from "../Hooks/Import.js"
import { forEachLineSlice } from "../Hooks/ImportSplitters.js"
import type { ImportResult } from "../Hooks/Api.js"
import { type ProgressOutput, ProgressReporter } from "./ImportProgress.js"
import {
  type AdminEndpoint,
  type ChunkingOptions,
  defaultChunking,
  failureOf,
  postWithRetries,
  RequestFailed
} from "./ImportRequests.js"

export { type AdminEndpoint, type ChunkingOptions, defaultChunking } from "./ImportRequests.js"

export interface NdjsonSource {
  readonly label: string
  readonly stream: ReadableStream<Uint8Array>
  /** What progress is measured against: the file's bytes, or the number of lines. */
  readonly total: { readonly bytes: number } | { readonly lines: number }
  /** The command that resumes at a line, printed when the import stops. */
  readonly resumeCommand: (line: number) => string
}

/** One NDJSON line the import takes, as the CLI's help and docs/operations.md show it (a test imports it). */
export const importExampleLine =
  `{"text":"Stop scrolling if you hate meal prep","platform":"tiktok","source_url":"https://www.tiktok.com/@cook/video/1","published_at":"2026-01-15T12:00:00Z"}`

/** The merged answer of every request, positions in lines of the whole input. */
export interface ImportSummary extends ImportResult {
  readonly lines_read: number
  readonly requests: number
}

/** Raised when a request failed for good: what was done, and where to resume. */
export class ImportStopped extends Error {
  readonly _tag = "ImportStopped"
  constructor(readonly summary: ImportSummary, readonly resumeLine: number, reason: string, resumeCommand: string) {
    super(`${reason}\nEvery line before ${resumeLine} is imported; nothing from line ${resumeLine} on was written by the failed request.\nResume with: ${resumeCommand}`)
  }
}

interface Chunk {
  readonly firstLine: number
  readonly lines: number
  readonly body: Uint8Array<ArrayBuffer>
  /** Bytes of the input consumed up to the end of this chunk (skipped lines included). */
  readonly endOffset: number
}

/** Cuts an NDJSON byte stream into bodies of whole lines, at most `chunkBytes` each, from line `fromLine`. */
async function* ndjsonChunks(stream: ReadableStream<Uint8Array>, fromLine: number, chunkBytes: number): AsyncGenerator<Chunk> {
  let line = 1
  let offset = 0
  let lineParts: Array<Uint8Array> = []
  let lineSize = 0
  let chunk = { firstLine: fromLine, lines: 0, parts: new Array<Uint8Array>(), size: 0, endOffset: 0 }
  const cut = (): Chunk => ({ firstLine: chunk.firstLine, lines: chunk.lines, body: Buffer.concat(chunk.parts, chunk.size), endOffset: chunk.endOffset })
  /** Ends the current line; answers the chunk it did not fit in, if any. */
  const endLine = (): Chunk | null => {
    let full: Chunk | null = null
    if (chunk.lines > 0 && chunk.size + lineSize > chunkBytes) {
      full = cut()
      chunk = { firstLine: line, lines: 0, parts: [], size: 0, endOffset: 0 }
    }
    chunk.parts.push(...lineParts)
    chunk.size += lineSize
    chunk.lines++
    chunk.endOffset = offset
    line++
    lineParts = []
    lineSize = 0
    return full
  }
  const reader = stream.getReader()
  for (;;) {
    const { done, value: data } = await reader.read()
    if (done) break
    const full: Array<Chunk> = []
    forEachLineSlice(data, (bytes, ended) => {
      if (line >= fromLine) {
        lineParts.push(bytes)
        lineSize += bytes.byteLength
      }
      offset += bytes.byteLength
      if (!ended) return
      if (line < fromLine) {
        line++
        return
      }
      const cutOff = endLine()
      if (cutOff !== null) full.push(cutOff)
    })
    yield* full
  }
  if (lineSize > 0) {
    const full = endLine()
    if (full !== null) yield full
  }
  if (chunk.lines > 0) yield cut()
}

/** Imports an NDJSON stream in requests under the body limit; throws ImportStopped when one fails for good. */
export const importNdjson = async (
  endpoint: AdminEndpoint,
  source: NdjsonSource,
  options: ChunkingOptions = defaultChunking,
  progressTo: ProgressOutput = process.stderr
) => {
  const progress = new ProgressReporter(source.label, source.total, progressTo)
  const rejected: Array<{ index: number; message: string }> = []
  let summary: ImportSummary = { object: "import_result", inserted: 0, updated: 0, rejected_count: 0, rejected, lines_read: 0, requests: 0 }
  /** Adds a committed chunk's answer to the summary, or stops the import at the chunk's first line. */
  const settle = async (chunk: Chunk, answer: Promise<ImportResult>) => {
    let result: ImportResult
    try {
      result = await answer
    } catch (error) {
      progress.stop()
      const reason = `The request for lines ${chunk.firstLine}–${chunk.firstLine + chunk.lines - 1} failed: ${error instanceof Error ? error.message : String(error)}`
      throw new ImportStopped(summary, chunk.firstLine, reason, source.resumeCommand(chunk.firstLine))
    }
    for (const rejection of result.rejected) {
      if (rejected.length < maxReportedRejections) rejected.push({ index: chunk.firstLine + rejection.index - 1, message: rejection.message })
    }
    summary = {
      ...summary,
      inserted: summary.inserted + result.inserted,
      updated: summary.updated + result.updated,
      rejected_count: summary.rejected_count + result.rejected_count,
      lines_read: chunk.firstLine + chunk.lines - 1,
      requests: summary.requests + 1
    }
    progress.update({ bytes: chunk.endOffset, lines: chunk.firstLine + chunk.lines - 1, hooks: summary.inserted + summary.updated })
  }
  // Two requests in flight: the next one is sent (and staged by the server) while the previous
  // one commits; it completes only after that one has committed (see gatedBody).
  let inFlight: { chunk: Chunk; answer: Promise<ImportResult>; committed: Promise<boolean> } | null = null
  try {
    for await (const chunk of ndjsonChunks(source.stream, options.fromLine, options.chunkBytes)) {
      progress.begin({ bytes: chunk.endOffset - chunk.body.byteLength, lines: chunk.firstLine - 1, hooks: 0 })
      const answer = postWithRetries(endpoint, chunk.body, options, inFlight?.committed ?? Promise.resolve(true))
      const previous = inFlight
      inFlight = { chunk, answer, committed: answer.then(() => true, () => false) }
      if (previous !== null) await settle(previous.chunk, previous.answer)
    }
    if (inFlight !== null) await settle(inFlight.chunk, inFlight.answer)
  } finally {
    // A request sent ahead of a failed one breaks off (nothing written); wait until it has.
    await inFlight?.committed
  }
  progress.stop()
  return summary
}

/** Demo hooks 0 … count-1 as an NDJSON stream (line n is hook n-1), generated as it is read. */
export const demoCatalogNdjson = (count: number): ReadableStream<Uint8Array> => {
  const encoder = new TextEncoder()
  const linesPerChunk = 500
  let next = 0
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (next >= count) return controller.close()
      const end = Math.min(count, next + linesPerChunk)
      let text = ""
      for (; next < end; next++) text += JSON.stringify(demoHook(next)) + "\n"
      controller.enqueue(encoder.encode(text))
    }
  })
}

/** A JSON array file: one streamed request (its positions are the array's). */
export const importJsonArray = async (endpoint: AdminEndpoint, path: string): Promise<ImportResult> => {
  const response = await fetch(`${endpoint.baseUrl}/admin/catalog/hooks`, {
    method: "POST",
    headers: { authorization: `Bearer ${endpoint.adminToken}`, "content-type": "application/json" },
    body: Bun.file(path)
  })
  if (response.status !== 200) throw new RequestFailed(await failureOf(response), false)
  return (await response.json()) as ImportResult
}

/**
 * A CLI command around an import: its summary; when it stops, the partial summary (with
 * `resume_from_line`) goes to stdout and the command fails with the reason and how to resume.
 */
const asCommand = <A>(run: () => Promise<A>) =>
  Effect.tryPromise({ try: run, catch: (error) => error }).pipe(
    Effect.catch((error) => {
      if (error instanceof ImportStopped) {
        process.stdout.write(JSON.stringify({ ...error.summary, resume_from_line: error.resumeLine }, null, 2) + "\n")
      }
      return Effect.die(error)
    })
  )

const shellWord = (word: string) => (/^[\w./:@%+=-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`)

const resumeFlags = (options: ChunkingOptions, line: number) =>
  ` --from-line ${line}${options.chunkBytes === defaultChunking.chunkBytes ? "" : ` --chunk-bytes ${options.chunkBytes}`}`

/** `catalog import FILE`: NDJSON in parts (resumable), a JSON array in one request. */
export const importCommand = (endpoint: AdminEndpoint, path: string, options: ChunkingOptions) =>
  asCommand(async () => {
    const file = Bun.file(path)
    if (!(await file.exists())) throw new Error(`No file ${path}.`)
    const format = formatOfFile(path, new Uint8Array(await file.slice(0, 64).arrayBuffer()))
    if (format === "json") {
      if (options.fromLine !== 1) throw new Error("--from-line applies to NDJSON files only.")
      return importJsonArray(endpoint, path)
    }
    return importNdjson(endpoint, {
      label: `importing ${path}`,
      stream: file.stream(),
      total: { bytes: file.size },
      resumeCommand: (line) => `npm run admin -- catalog import ${shellWord(path)}${resumeFlags(options, line)}`
    }, options)
  })

/** `catalog seed-demo --count N`: the demo catalog through the same import (line n is hook n-1). */
export const seedDemoCommand = (endpoint: AdminEndpoint, count: number, options: ChunkingOptions) =>
  asCommand(() =>
    importNdjson(endpoint, {
      label: "seeding the demo catalog",
      stream: demoCatalogNdjson(count),
      total: { lines: count },
      resumeCommand: (line) => `npm run admin -- catalog seed-demo --count ${count}${resumeFlags(options, line)}`
    }, options)
  )
