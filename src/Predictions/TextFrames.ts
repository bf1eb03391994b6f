/**
 * The frames of a clip's opening that are read for on-screen text: which ones, how they are
 * prepared (an ffmpeg filter chain in the scorer's one pass), and where they are kept meanwhile.
 */
import { Duration, Effect } from "effect"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { ScorerConfig } from "./Config.js"

/**
 * The frames read for text: from SCORER_TEXT_FIRST_FRAME, one every SCORER_TEXT_FRAME_SPACING,
 * the shorter side scaled down to SCORER_TEXT_FRAME_SIZE and the area to SCORER_TEXT_FRAME_AREA (a
 * 16384x544 clip is read at 3950x130, not 16262x540), in colour: CaptionInk.ts finds the
 * caption's ink on them, whatever its colour and polarity.
 */
export const textChain = (config: ScorerConfig) => {
  const first = Duration.toSeconds(config.textFirstFrame)
  const spacing = Duration.toSeconds(config.textFrameSpacing)
  const factor = `min(1\\,min(${config.textFrameSize}/min(iw\\,ih)\\,sqrt(${config.textFrameArea}/(iw*ih))))`
  return `select='gte(t\\,${first})*(isnan(prev_selected_t)+gte(t-prev_selected_t\\,${spacing}))',` +
    `scale=w='max(2\\,trunc(iw*${factor}/2)*2)':h='max(2\\,trunc(ih*${factor}/2)*2)':flags=area,format=rgb24`
}

/** Runs `use` with a fresh directory for the frames to read (null when text is not read), then reads them and removes it. */
export const withTextFrames = <A, E>(enabled: boolean, maxFrames: number, use: (dir: string | null) => Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => (enabled ? mkdtempSync(join(tmpdir(), "hookline-frames-")) : null)),
    (dir) =>
      Effect.flatMap(use(dir), (result) =>
        Effect.sync(() => {
          if (dir === null) return { result, frames: [] }
          const names = readdirSync(dir).filter((name) => /^\d+\.ppm$/.test(name)).sort((a, b) => parseInt(a) - parseInt(b))
          return { result, frames: names.slice(0, maxFrames).map((name) => readFileSync(join(dir, name))) }
        })),
    (dir) => Effect.sync(() => dir === null || rmSync(dir, { recursive: true, force: true }))
  )
