/**
 * What the scorer's ffmpeg pass prints, read into the opening's features: the frames' scene
 * scores and luma changes (`metadata=print`), the loudness (ebur128's summary), and a stream's
 * duration from its packets when the container does not state it.
 */
import type { OpeningFeatures } from "./BandModel.js"

export interface FrameSample {
  readonly time: number
  readonly scene: number
  readonly lumaChange: number
}

/** `metadata=print` output: a `frame:N pts:P pts_time:T` line, then `key=value` lines. */
export const parseFrameMetadata = (text: string): ReadonlyArray<FrameSample> => {
  const frames: Array<{ time: number; scene: number; lumaChange: number }> = []
  for (const line of text.split("\n")) {
    const header = /^frame:\d+\s+pts:\S+\s+pts_time:(\S+)/.exec(line)
    if (header !== null) {
      frames.push({ time: Number(header[1]), scene: 0, lumaChange: 0 })
      continue
    }
    const current = frames[frames.length - 1]
    if (current === undefined) continue
    if (line.startsWith("lavfi.scene_score=")) current.scene = Number(line.slice("lavfi.scene_score=".length))
    else if (line.startsWith("lavfi.signalstats.YDIF=")) current.lumaChange = Number(line.slice("lavfi.signalstats.YDIF=".length))
  }
  return frames.filter((frame) => Number.isFinite(frame.time))
}

/** The integrated loudness from ebur128's summary, or null when absent. */
export const parseIntegratedLoudness = (stderr: string): number | null => {
  const summary = stderr.lastIndexOf("Summary:")
  if (summary === -1) return null
  const match = /I:\s+(-?[\d.]+|-inf)\s+LUFS/.exec(stderr.slice(summary))
  if (match === null) return null
  return match[1] === "-inf" ? -70 : Number(match[1])
}

/** Video packets' end time minus their start: the duration of a stream whose container does not state it. */
export const parsePacketSpan = (csv: string): number | null => {
  let first = Infinity
  let last = -Infinity
  for (const line of csv.split("\n")) {
    const [pts, duration] = line.trim().split(",")
    const start = Number(pts)
    if (pts === undefined || pts === "" || !Number.isFinite(start)) continue
    const length = Number(duration)
    first = Math.min(first, start)
    last = Math.max(last, start + (Number.isFinite(length) ? length : 0))
  }
  return Number.isFinite(first) && last > first ? last - first : null
}

export const round3 = (value: number) => Math.round(value * 1000) / 1000

export interface OpeningAnalysis extends OpeningFeatures {
  readonly frames: number
}

/** The features of the opening, from the frames' scene scores and luma changes. */
export const analyseOpening = (
  frames: ReadonlyArray<FrameSample>,
  loudnessLufs: number | null,
  options: { readonly cutThreshold: number; readonly cutSkipSec: number }
): OpeningAnalysis => {
  const start = frames[0]?.time ?? 0
  const cut = frames.find((frame) => frame.time - start > options.cutSkipSec && frame.scene > options.cutThreshold)
  // Motion: consecutive frames within one shot, normalised to 30 fps so frame rate does not count.
  let motionSum = 0
  let motionFrames = 0
  for (let i = 1; i < frames.length; i++) {
    const step = frames[i].time - frames[i - 1].time
    if (step <= 0 || frames[i].scene > options.cutThreshold) continue
    motionSum += frames[i].lumaChange / (step * 30)
    motionFrames++
  }
  return {
    frames: frames.length,
    hookDurationSec: cut === undefined ? null : round3(cut.time - start),
    motion: motionFrames === 0 ? 0 : round3(motionSum / motionFrames),
    loudnessLufs: loudnessLufs === null ? null : round3(loudnessLufs)
  }
}
