/**
 * Reads the on-screen hook of a clip's opening with tesseract.js (OCR compiled to WebAssembly,
 * in a worker thread) and the English model installed with `@tesseract.js-data/eng`: nothing is
 * fetched at run time, and tesseract's cache goes to a temporary directory removed on shutdown.
 *
 * One OCR worker per process, started on the first clip and reused; clips take turns on it, and
 * each clip's turn is capped by SCORER_TEXT_TIMEOUT. A turn out of time (or failing) terminates
 * the worker, which stops the recognition itself, and the next clip gets a fresh worker: a frame
 * crafted to keep the engine busy costs one clip its text, not every clip after it. Reading is
 * best effort: a worker that cannot start, a frame it cannot read or a turn out of time gives no
 * text, never a failed job.
 */
import { Context, Duration, Effect, Layer, Option, Semaphore } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { createWorker, OEM, PSM, type Worker } from "tesseract.js"
import { ScorerConfig } from "./Config.js"
import { inkOf, type Polarity, readNetpbm, writePgm } from "./CaptionInk.js"
import { type FrameReading, type HookReading, isConfident, mergeReadings, readingScore } from "./HookText.js"

export interface HookReaderApi {
  /** Whether text is read at all (SCORER_READ_TEXT). */
  readonly enabled: boolean
  /** The hook line on these frames (binary PPM colour or PGM grey image files, in time order), or null. */
  readonly read: (frames: ReadonlyArray<Uint8Array>) => Effect.Effect<HookReading | null>
}

/** The installed English model (the integer LSTM one, which the LSTM engine reads fastest). */
const englishModelPath = () =>
  join(dirname(createRequire(import.meta.url).resolve("@tesseract.js-data/eng/package.json")), "4.0.0_best_int")

/** Words and confidences of each line the engine found on one frame. */
const linesOf = (page: Awaited<ReturnType<Worker["recognize"]>>["data"]): FrameReading =>
  (page.blocks ?? []).flatMap((block) =>
    block.paragraphs.flatMap((paragraph) =>
      paragraph.lines.map((line) => line.words.map((word) => ({ text: word.text, confidence: word.confidence })))
    )
  )

const startWorker = (cachePath: string) =>
  Effect.tryPromise(async () => {
    const worker = await createWorker("eng", OEM.LSTM_ONLY, {
      langPath: englishModelPath(),
      cachePath,
      gzip: true,
      errorHandler: () => {}
    })
    // Captions are a few short lines anywhere on the frame: sparse text finds them without a page layout.
    // The frames carry no resolution; stating one keeps the engine from guessing it (and saying so on stderr).
    await worker.setParameters({ tessedit_pageseg_mode: PSM.SPARSE_TEXT, user_defined_dpi: "300" })
    return worker
  })

/**
 * The process's one OCR worker: started by the first turn and kept until a turn runs out of time
 * or fails; after a failed start, none (logged once). Terminated with the layer.
 */
const keptWorker = Effect.gen(function*() {
  let cachePath: string | undefined
  let current: Worker | "failed" | undefined
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      if (current !== undefined && current !== "failed") await current.terminate().catch(() => undefined)
      if (cachePath !== undefined) rmSync(cachePath, { recursive: true, force: true })
    })
  )
  const worker = Effect.suspend(() => {
    if (current === "failed") return Effect.succeed(Option.none<Worker>())
    if (current !== undefined) return Effect.succeed(Option.some(current))
    // Made by the first reading: a process that never reads text leaves none behind, even when killed.
    cachePath ??= mkdtempSync(join(tmpdir(), "hookline-ocr-"))
    return startWorker(cachePath).pipe(
      Effect.map((started) => {
        current = started
        return Option.some(started)
      }),
      Effect.catch((error) =>
        Effect.logWarning("the text reader could not start; clips score without hook text").pipe(
          Effect.annotateLogs("error", String(error.cause)),
          Effect.andThen(Effect.sync(() => {
            current = "failed"
          })),
          Effect.as(Option.none<Worker>())
        )
      )
    )
  })
  /**
   * Stops a worker whose recognition ran past the cap or failed (terminating its thread stops the
   * recognition itself, not only the wait for it); the next turn starts a fresh one.
   */
  const discard = (ocr: Worker, reason: string) =>
    Effect.logWarning(`the text reader ${reason}; its worker is stopped and a fresh one starts for the next clip`).pipe(
      Effect.andThen(Effect.promise(() => ocr.terminate().catch(() => undefined))),
      Effect.andThen(Effect.sync(() => {
        if (current === ocr) current = undefined
      }))
    )
  return { worker, discard }
})

/** A line with no letter in any word (a timecode, a clock, a score) is not part of a hook line. */
const withLetters = (reading: FrameReading): FrameReading =>
  reading.filter((line) => line.some((word) => /\p{L}/u.test(word.text)))

const recognize = (ocr: Worker, image: Uint8Array) =>
  Effect.tryPromise(() => ocr.recognize(Buffer.from(image), {}, { blocks: true, text: false })).pipe(
    Effect.map((result) => withLetters(linesOf(result.data)))
  )

/**
 * Each frame in the polarity that read the clip's previous frame (light ink first), then in the
 * other when that gives no confident caption; the more confident reading is kept. A polarity
 * with no glyph-like ink is not handed to the engine at all.
 */
const readFrames = (ocr: Worker, frames: ReadonlyArray<Uint8Array>, minConfidence: number) =>
  Effect.suspend(() => {
    let preferred: Polarity = "light"
    return Effect.forEach(frames, (frame) =>
      Effect.gen(function*() {
        const picture = readNetpbm(frame)
        if (picture === null) return yield* recognize(ocr, frame)
        const order: ReadonlyArray<Polarity> = preferred === "light" ? ["light", "dark"] : ["dark", "light"]
        let best: { polarity: Polarity; reading: FrameReading; score: number } | null = null
        for (const polarity of order) {
          const ink = inkOf(picture, polarity)
          const reading = ink === null ? [] : yield* recognize(ocr, writePgm(ink))
          const score = readingScore(reading, minConfidence)
          if (best === null || score > best.score) best = { polarity, reading, score }
          if (isConfident(reading, minConfidence)) break
        }
        preferred = best!.polarity
        return best!.reading
      }))
  })

const make = Effect.gen(function*() {
  const config = yield* ScorerConfig
  if (!config.readText) return { enabled: false, read: () => Effect.succeed(null) } satisfies HookReaderApi
  const { discard, worker } = yield* keptWorker
  const turn = yield* Semaphore.make(1)

  const readWith = (ocr: Worker, frames: ReadonlyArray<Uint8Array>) =>
    readFrames(ocr, frames, config.textMinConfidence).pipe(
      Effect.timeoutOption(config.textTimeout),
      Effect.flatMap(Option.match({
        onNone: () => Effect.as(discard(ocr, `ran past SCORER_TEXT_TIMEOUT (${Duration.format(config.textTimeout)})`), null),
        onSome: (readings) => Effect.succeed(mergeReadings(readings, config.textMinConfidence))
      })),
      Effect.catch((error) =>
        discard(ocr, "failed on a clip").pipe(Effect.annotateLogs("error", String(error.cause)), Effect.as(null))
      )
    )

  const read = (frames: ReadonlyArray<Uint8Array>): Effect.Effect<HookReading | null> =>
    frames.length === 0
      ? Effect.succeed(null)
      : worker.pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.succeed(null), onSome: (ocr) => readWith(ocr, frames) })),
        turn.withPermits(1),
        Effect.withSpan("HookReader.read")
      )

  return { enabled: true, read } satisfies HookReaderApi
})

export class HookReader extends Context.Service<HookReader, HookReaderApi>()("hookline/HookReader") {
  static readonly layer = Layer.effect(HookReader, make)
}
