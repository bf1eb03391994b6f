/**
 * Cutting an import body into records, chunk by chunk in constant memory: NDJSON by lines (the
 * index is the 1-based line number; blank lines are skipped but counted), a JSON array by its
 * elements at depth 1 (the index is the element's 0-based position).
 */
export type ImportFormat = "json" | "ndjson"

/** A body that is not an array of hooks at all (nothing was imported). */
export class NotAHookArray extends Error {}

/** One record cut out of the stream: its position, and its text or why it could not be read. */
export type Piece = { readonly index: number; readonly text: string } | { readonly index: number; readonly problem: string }

export interface Splitter {
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

/** The bytes of the record being cut, up to `maxBytes` (past that only its length is counted). */
class RecordBytes {
  private parts: Array<Uint8Array> = []
  length = 0
  overflow = false
  constructor(private readonly maxBytes: number) {}

  take(slice: Uint8Array) {
    if (this.overflow) return
    if (this.length + slice.byteLength > this.maxBytes) {
      this.overflow = true
      this.parts = []
    } else if (slice.byteLength > 0) {
      this.parts.push(slice.slice())
    }
    this.length += slice.byteLength
  }

  /** The record's text, or why it cannot be read; the buffer is empty again afterwards. */
  finish(notUtf8: string): { readonly text: string } | { readonly problem: string } {
    const bytes = joined(this.parts, this.length)
    const overflow = this.overflow
    this.parts = []
    this.length = 0
    this.overflow = false
    if (overflow) return { problem: tooLarge(this.maxBytes) }
    const text = decode(bytes)
    return text === null ? { problem: notUtf8 } : { text }
  }
}

/**
 * The NDJSON line scan, written once for both ends (this splitter, and the CLI's cutting of a file
 * into requests): each slice of `chunk` up to and including a newline (`ended`), then the rest of
 * the chunk, a line that goes on in the next one.
 */
export const forEachLineSlice = (chunk: Uint8Array, slice: (bytes: Uint8Array, ended: boolean) => void): void => {
  let from = 0
  while (from < chunk.byteLength) {
    const newline = chunk.indexOf(0x0a, from)
    const end = newline === -1 ? chunk.byteLength : newline + 1
    slice(chunk.subarray(from, end), newline !== -1)
    from = end
  }
}

/** NDJSON: records end at a newline; the index is the 1-based line number. */
export const ndjsonSplitter = (maxBytes: number): Splitter => {
  let line = 1
  const record = new RecordBytes(maxBytes)
  const finish = (): Array<Piece> => {
    const index = line++
    const read = record.finish("the line is not valid UTF-8")
    return "text" in read && read.text.trim() === "" ? [] : [{ index, ...read }]
  }
  return {
    push: (chunk) => {
      const pieces: Array<Piece> = []
      forEachLineSlice(chunk, (bytes, ended) => {
        if (!ended) return record.take(bytes)
        record.take(bytes.subarray(0, bytes.byteLength - 1))
        pieces.push(...finish())
      })
      return pieces
    },
    end: () => (record.length > 0 || record.overflow ? finish() : [])
  }
}

export const isSpace = (byte: number) => byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09

type ArrayState = "start" | "value" | "after" | "done" | "trailing"

/** What an array body that ended in `state` still owes: its open record, or why the array is not whole. */
const arrayEnd = (state: ArrayState, index: number, finish: () => Piece): Array<Piece> => {
  if (state === "start") throw new NotAHookArray("The body is empty: send a JSON array of hooks.")
  if (state === "value") {
    const last = finish()
    return ["text" in last ? { index: last.index, problem: "the JSON array is not closed (the body ended inside this record)" } : last]
  }
  if (state === "after") return [{ index, problem: "the JSON array is not closed" }]
  return []
}

/**
 * A JSON array: elements are cut at depth 1 by tracking strings and brackets only, so a broken
 * element is reported on its own and the rest of the array is still read. The index is the
 * element's 0-based position.
 */
export const jsonArraySplitter = (maxBytes: number): Splitter => {
  let state: ArrayState = "start"
  let index = 0
  let depth = 0
  let inString = false
  let escaped = false
  let bomChecked = false
  const record = new RecordBytes(maxBytes)
  const take = (slice: Uint8Array) => record.take(slice)
  const finish = (): Piece => ({ index: index++, ...record.finish("the record is not valid UTF-8") })

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
    end: () => arrayEnd(state, index, finish)
  }
}

/** The splitter for a format, with the largest record it accepts. */
export const splitterFor = (format: ImportFormat, maxRecordBytes: number): Splitter =>
  format === "ndjson" ? ndjsonSplitter(maxRecordBytes) : jsonArraySplitter(maxRecordBytes)
