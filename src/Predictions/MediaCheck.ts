/**
 * The bytes of an upload: what kind of video they are (by their first bytes, not the
 * Content-Type) and a byte limit enforced while they stream past.
 */
import { Effect, Sink, Stream } from "effect"
import { PayloadTooLarge, UnsupportedMediaType } from "../Errors.js"

export type MediaKind = "mp4" | "mov" | "webm"

/** Bytes needed to recognise a file: the ISO BMFF `ftyp` box or the EBML header with its DocType. */
export const sniffLength = 64

/** ISO BMFF brands of still images and audio-only files: the `ftyp` box alone does not make a video. */
const nonVideoBrands = new Set(["M4A ", "M4B ", "M4P ", "F4A ", "F4B ", "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1", "avif", "avis", "crx "])

const ascii = (bytes: Uint8Array, from: number, to: number) => String.fromCharCode(...bytes.subarray(from, to))

/**
 * MP4 and MOV are ISO BMFF: a box whose type (bytes 4..8) is `ftyp`, major brand `qt  ` for
 * QuickTime. WebM is EBML (1A 45 DF A3) whose DocType is "webm" (plain Matroska is refused).
 */
export const sniffMediaKind = (head: Uint8Array): MediaKind | null => {
  if (head.length >= 12 && ascii(head, 4, 8) === "ftyp") {
    const brand = ascii(head, 8, 12)
    if (brand === "qt  ") return "mov"
    return nonVideoBrands.has(brand) ? null : "mp4"
  }
  if (head.length >= 4 && head[0] === 0x1a && head[1] === 0x45 && head[2] === 0xdf && head[3] === 0xa3) {
    // DocType element: id 42 82, a one-byte size (84 for "webm"), then the text.
    for (let i = 4; i + 7 <= head.length; i++) {
      if (head[i] === 0x42 && head[i + 1] === 0x82 && head[i + 2] === 0x84 && ascii(head, i + 3, i + 7) === "webm") {
        return "webm"
      }
    }
  }
  return null
}

const concatBytes = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}

/** Also the answer to an empty body; the PUT released the link, so the message says it can be retried. */
export const unsupportedMedia = () =>
  new UnsupportedMediaType({
    message: "The body is not an MP4, MOV or WebM video (it is empty, a form upload or another kind of file). " +
      "Send the file's raw bytes as the body: curl -X PUT --data-binary @clip.mp4 <upload_url>. " +
      "This upload link is still usable until it expires."
  })

export const tooLarge = (maxBytes: number) =>
  new PayloadTooLarge({ message: `The file is larger than ${maxBytes} bytes.` })

/**
 * Checks a body as it streams: the first bytes must be a supported video (else
 * UnsupportedMediaType, before anything is passed on) and the total may not pass `maxBytes`
 * (PayloadTooLarge as soon as it does). Memory stays at one chunk plus the first few bytes.
 */
export const checkedVideoBody = <E, R>(body: Stream.Stream<Uint8Array, E, R>, maxBytes: number) =>
  Effect.gen(function*() {
    const [headChunks, rest] = yield* Stream.peel(
      body,
      Sink.fold<Array<Uint8Array>, Uint8Array>(
        () => [],
        (parts) => parts.reduce((sum, part) => sum + part.length, 0) < sniffLength,
        (parts, chunk) => Effect.succeed([...parts, chunk])
      )
    )
    const kind = sniffMediaKind(concatBytes(headChunks).subarray(0, sniffLength))
    if (kind === null) return yield* unsupportedMedia()
    let total = 0
    const stream = Stream.concat(Stream.fromIterable(headChunks), rest).pipe(
      Stream.mapEffect((chunk) => {
        total += chunk.length
        return total > maxBytes ? Effect.fail(tooLarge(maxBytes)) : Effect.succeed(chunk)
      })
    )
    return { kind, stream }
  })
