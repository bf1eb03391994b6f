/**
 * The clip scorer: a replaceable service (a model service can take its place as another Layer).
 * The default analyses the file itself with ffprobe and ffmpeg:
 *
 * 1. ffprobe (JSON): container, streams and duration; a WebM written without a duration is
 *    measured by scanning its video packets. No video stream, or unreadable → unsupported_media;
 *    longer than CLIP_MAX_DURATION (180 s) → clip_too_long.
 * 2. One ffmpeg pass over the opening (SCORER_OPENING_WINDOW, 10 s), decoded without the loop
 *    filter: frames are downscaled to at most 180 lines (both measurements compare whole frames
 *    and need no detail; at 360 lines the filters after the scale cost four times as much), their
 *    luma change measured (`signalstats`: motion), then converted to planar RGB (`format=gbrp`)
 *    before the `select` filter's scene score, because on YUV input that score looks at luma
 *    only and a cut between two colours of equal brightness would go unseen. The first frame
 *    whose score passes SCORER_CUT_THRESHOLD (0.3), later than SCORER_CUT_SKIP (0.2 s), is the
 *    first hard cut; `hook_duration_sec` is its time from the first frame (so a stream that
 *    starts late, as WebM with Opus pre-skip or MP4 edit lists do, is measured from its own
 *    start). A gradual change (cross-dissolve, fade) never scores that high in one frame, so it
 *    is not a cut. `ebur128` gives the loudness. The same pass writes the few frames read for
 *    text (TextFrames.ts).
 * 3. BandModel.ts maps the measurements to a band.
 * 4. The on-screen hook: the frames are read (HookReader.ts, HookText.ts) and the line read is
 *    looked up in the catalog (HookNeighbours.ts: similar hooks, and the category they agree on).
 *    Best effort: nothing read, or a reader that fails, leaves hook_text null and scores as before.
 *
 * A hostile file costs bounded work: at most SCORER_MAX_FRAMES frames are analysed, each tool's
 * output is read as it streams and capped (SCORER_MAX_OUTPUT_BYTES; past it the tool is killed
 * and the clip fails with analysis_failed), only the end of stderr is kept, and every run has
 * ANALYSIS_TIMEOUT. Before any of it, ClipProbe.ts pins the demuxer, refuses frames past
 * SCORER_MAX_PIXELS from the headers alone, and bounds the tools' threads and memory.
 */
import { Context, Duration, Effect, Layer } from "effect"
import { join } from "node:path"
import type { Band } from "./Domain.js"
import { bandOf } from "./BandModel.js"
import {
  checkFrameSize,
  decodeOptions,
  type Demuxer,
  failure,
  inputOptions,
  isVideoStream,
  measureDuration,
  memoryCapped,
  probe,
  type Run,
  type ScoreFailure,
  sniffDemuxer
} from "./ClipProbe.js"
import { ScorerConfig } from "./Config.js"
import { findNeighbours, type SimilarHook } from "./HookNeighbours.js"
import { HookReader, type HookReaderApi } from "./HookReader.js"
import { analyseOpening, parseFrameMetadata, parseIntegratedLoudness, round3 } from "./OpeningAnalysis.js"
import { textChain, withTextFrames } from "./TextFrames.js"
import { isBundledTool, locateTool, runProcess } from "./Tools.js"

export { ScoreFailure, type ScoreFailureType } from "./ClipProbe.js"
export { analyseOpening, parseFrameMetadata, parseIntegratedLoudness, parsePacketSpan } from "./OpeningAnalysis.js"

export interface ClipScore {
  readonly band: Band
  readonly hookDurationSec: number | null
  readonly durationSec: number | null
  readonly category: { readonly slug: string } | null
  /** The on-screen hook; absent from a scorer that does not read text (as if nothing was read). */
  readonly hook?: HookFindings
  /** What the band was computed from, kept with the result for support questions. */
  readonly features: Record<string, number | string | null>
}

/** What was read on screen in the opening, and the catalog hooks nearest to it. */
export interface HookFindings {
  readonly text: string | null
  /** 0..1; null when nothing was read. */
  readonly confidence: number | null
  readonly similar: ReadonlyArray<SimilarHook>
}

export interface ClipScorerApi {
  readonly score: (clip: { readonly path: string }) => Effect.Effect<ClipScore, ScoreFailure>
}

/**
 * The opening's video chain. Each frame is downscaled (fast bilinear: the scores compare frames,
 * they need no fine resampling), its luma change measured, then converted to planar RGB for the
 * scene score, which on YUV input looks at luma only (a cut between two colours of equal
 * brightness would go unseen).
 */
const measuringChain = "scale=w=-2:h='min(ih,180)':flags=fast_bilinear,signalstats,format=gbrp,select='gte(scene\\,0)'," +
  "metadata=mode=print:file=-"

/**
 * One ffmpeg pass over the opening: the frames' scene scores and luma changes, the loudness, and
 * (given `textFrames`, a directory) the frames to read for text, written there as PPM files.
 * The loop filter is skipped while decoding: the measurements do not need it, and it is a
 * quarter of the decoding time.
 */
const analyse = (
  run: Run,
  ffmpeg: string,
  clip: string,
  demuxer: Demuxer,
  streams: { video: number; audio: number | null },
  config: ScorerConfig,
  durationSec: number,
  textFrames: string | null
) =>
  Effect.gen(function*() {
    const videoChain = textFrames === null
      ? `[0:${streams.video}]${measuringChain}[v]`
      : `[0:${streams.video}]split[m][t];[m]${measuringChain}[v];[t]${textChain(config)}[text]`
    const graph = streams.audio === null ? videoChain : `${videoChain};[0:${streams.audio}]ebur128=framelog=verbose[a]`
    const analysed = yield* run(
      [
        ffmpeg, "-hide_banner", "-nostats", "-v", "info", "-filter_complex_threads", String(config.toolThreads),
        ...inputOptions(demuxer, config), ...decodeOptions(config), "-skip_loop_filter", "all", "-flags2", "+fast",
        "-t", String(Duration.toSeconds(config.openingWindow)), "-i", clip,
        "-filter_complex", graph, "-map", "[v]", "-frames:v", String(config.maxFrames), "-f", "null", "-",
        ...(streams.audio === null ? [] : ["-map", "[a]", "-f", "null", "-"]),
        // vfr: the frames picked are written once each (a constant-rate output would repeat them to fill the gaps).
        ...(textFrames === null
          ? []
          : ["-map", "[text]", "-vsync", "vfr", "-frames:v", String(config.textFrames), "-f", "image2", join(textFrames, "%d.ppm")])
      ],
      durationSec
    )
    // The filter graph may print a frame or two past the output's -frames:v before ffmpeg stops.
    const frames = parseFrameMetadata(analysed.stdout).slice(0, config.maxFrames)
    if (analysed.exitCode !== 0 || frames.length === 0) {
      yield* Effect.logDebug("ffmpeg could not decode the clip").pipe(Effect.annotateLogs("stderr", analysed.stderr.slice(-500)))
      return yield* failure("unsupported_media", "The video could not be decoded.", durationSec)
    }
    return analyseOpening(frames, streams.audio === null ? null : parseIntegratedLoudness(analysed.stderr), {
      cutThreshold: config.cutThreshold,
      cutSkipSec: Duration.toSeconds(config.cutSkip)
    })
  })

const nothingRead = { findings: { text: null, confidence: null, similar: [] }, category: null } as const

/** The hook line on the frames and its neighbours in the catalog (HookNeighbours.ts has the category rule). */
const readHook = (reader: HookReaderApi, frames: ReadonlyArray<Uint8Array>) =>
  Effect.gen(function*() {
    const reading = yield* reader.read(frames)
    if (reading === null) return nothingRead
    const neighbours = yield* findNeighbours(reading.text)
    return {
      findings: { text: reading.text, confidence: reading.confidence, similar: neighbours.similar },
      category: neighbours.category
    }
  })

/** The default scorer: ffprobe and ffmpeg on the clip's local file. */
const make = Effect.gen(function*() {
  const config = yield* ScorerConfig
  const reader = yield* HookReader
  const ffprobe = yield* locateTool(config.ffprobePath, "ffprobe")
  const ffmpeg = yield* locateTool(config.ffmpegPath, "ffmpeg")
  if (ffprobe === null || ffmpeg === null) {
    yield* Effect.logError("ffmpeg/ffprobe not found: set FFMPEG_PATH and FFPROBE_PATH or install ffmpeg; clips will fail with analysis_failed")
  } else if (isBundledTool(ffmpeg) || isBundledTool(ffprobe)) {
    yield* Effect.logWarning(
      "the scorer parses uploads with the npm-bundled ffmpeg (a 2018 build, for development): " +
        "install ffmpeg on the system or set FFMPEG_PATH and FFPROBE_PATH before taking uploads from anyone"
    )
  }
  const prlimit = Bun.which("prlimit")
  if (prlimit === null) yield* Effect.logWarning("prlimit not found: the media tools run without SCORER_TOOL_MEMORY")
  const capped = memoryCapped(prlimit, config.toolMemoryBytes)
  const timeoutSec = Duration.toSeconds(config.analysisTimeout)
  const maxDurationSec = Duration.toSeconds(config.maxClipDuration)

  const run: Run = (command, durationSec) =>
    runProcess(capped(command), config.analysisTimeout, config.maxOutputBytes).pipe(
      Effect.catchTags({
        ProcessTimeout: () =>
          Effect.fail(failure("analysis_failed", `The analysis took longer than ${timeoutSec} seconds.`, durationSec)),
        OutputTooLarge: () =>
          Effect.fail(failure("analysis_failed", "The analysis produced more output than allowed for one clip.", durationSec))
      })
    )

  const score = (clip: { readonly path: string }): Effect.Effect<ClipScore, ScoreFailure> =>
    Effect.gen(function*() {
      if (ffprobe === null || ffmpeg === null) {
        return yield* failure("analysis_failed", "The media analyser is not available on this server.")
      }
      const demuxer = yield* sniffDemuxer(clip.path)
      const probed = yield* probe(run, clip.path, ffprobe, demuxer, config)
      const container = probed.format?.format_name ?? ""
      if (!/\b(mov|mp4|webm)\b/.test(container)) {
        return yield* failure("unsupported_media", "The file is not an MP4, MOV or WebM video.")
      }
      const video = probed.streams.find(isVideoStream)
      if (video === undefined) return yield* failure("unsupported_media", "The file has no video stream.")
      yield* checkFrameSize(video, config.maxPixels)
      const durationSec = yield* measureDuration(run, clip.path, ffprobe, probed, video.index, inputOptions(demuxer, config))
      if (durationSec === null) return yield* failure("unsupported_media", "The video stream holds no frames.")
      if (durationSec > maxDurationSec) {
        return yield* failure(
          "clip_too_long",
          `The clip lasts ${Math.round(durationSec)} seconds; at most ${maxDurationSec} are scored.`,
          round3(durationSec)
        )
      }
      const audio = probed.streams.find((s) => s.codec_type === "audio")
      const streams = { video: video.index, audio: audio?.index ?? null }
      const { frames, result: opening } = yield* withTextFrames(reader.enabled, config.textFrames, (dir) =>
        analyse(run, ffmpeg, clip.path, demuxer, streams, config, round3(durationSec), dir))
      const hook = yield* readHook(reader, frames)
      return {
        band: bandOf(opening),
        hookDurationSec: opening.hookDurationSec,
        durationSec: round3(durationSec),
        category: hook.category,
        hook: hook.findings,
        features: {
          container: container.includes("webm") ? "webm" : "mp4/mov",
          video_codec: video.codec_name ?? null,
          width: video.width ?? null,
          height: video.height ?? null,
          frames_analysed: opening.frames,
          motion: opening.motion,
          loudness_lufs: opening.loudnessLufs
        }
      }
    }).pipe(Effect.withSpan("ClipScorer.score"))

  const api: ClipScorerApi = { score }
  return api
})

/** Swappable: a model service, or a test's fake, takes its place as another Layer. */
export class ClipScorer extends Context.Service<ClipScorer, ClipScorerApi>()("hookline/ClipScorer") {
  /** Over a text reader given by the caller (a test's, to see the frames it is handed). */
  static readonly withReader = Layer.effect(ClipScorer, make)
  /** With its text reader (one OCR worker for the process, released with the layer). */
  static readonly layer = ClipScorer.withReader.pipe(Layer.provide(HookReader.layer))
}
