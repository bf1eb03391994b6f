/**
 * What the scorer learns about a clip before decoding any of it, and the bounds every run of
 * the media tools on an untrusted file is held to:
 *
 * - the container is sniffed from the file's first bytes (MediaCheck.ts) and ffprobe/ffmpeg are
 *   told it (`-f mov` or `-f matroska`): no other demuxer is tried, and `-format_whitelist`
 *   keeps any nested one (an HLS playlist, a concat list) out; `-protocol_whitelist file` keeps
 *   them on the local file;
 * - ffprobe reads the headers without decoding a frame (`-skip_frame all`), so the frame size is
 *   known before any picture is allocated; a frame larger than SCORER_MAX_PIXELS is refused;
 * - ffmpeg decodes with SCORER_TOOL_THREADS threads and `-max_pixels`, and each tool runs under
 *   `prlimit --as=SCORER_TOOL_MEMORY` where prlimit is installed.
 */
import { Data, Effect, Schema } from "effect"
import { open } from "node:fs/promises"
import type { ScorerConfig } from "./Config.js"
import { sniffLength, sniffMediaKind } from "./MediaCheck.js"
import { parsePacketSpan } from "./OpeningAnalysis.js"
import type { ProcessResult } from "./Tools.js"

export type ScoreFailureType = "unsupported_media" | "clip_too_long" | "analysis_failed"

export class ScoreFailure extends Data.TaggedError("ScoreFailure")<{
  readonly type: ScoreFailureType
  readonly message: string
  /** The clip's duration when it was measured before the failure. */
  readonly durationSec: number | null
}> {}

export const failure = (type: ScoreFailureType, message: string, durationSec: number | null = null) =>
  new ScoreFailure({ type, message, durationSec })

/** Runs one of the tools for a clip; its timeout and output cap fail the clip with analysis_failed. */
export type Run = (command: ReadonlyArray<string>, durationSec: number | null) => Effect.Effect<ProcessResult, ScoreFailure>

const NumberString = Schema.Union([Schema.NumberFromString, Schema.Number])

const ProbeOutput = Schema.Struct({
  streams: Schema.Array(Schema.Struct({
    index: Schema.Number,
    codec_type: Schema.optional(Schema.String),
    codec_name: Schema.optional(Schema.String),
    width: Schema.optional(Schema.Number),
    height: Schema.optional(Schema.Number),
    duration: Schema.optional(NumberString),
    avg_frame_rate: Schema.optional(Schema.String),
    disposition: Schema.optional(Schema.Struct({ attached_pic: Schema.optional(Schema.Number) }))
  })).pipe(Schema.withDecodingDefault(Effect.succeed([]))),
  format: Schema.optional(Schema.Struct({
    format_name: Schema.optional(Schema.String),
    duration: Schema.optional(NumberString)
  }))
})
export type ProbeOutput = typeof ProbeOutput.Type

/** The demuxers the tools may use: ISO BMFF (MP4, MOV) and Matroska (WebM). */
export type Demuxer = "mov" | "matroska"
const allowedDemuxers = "mov,matroska"

const unreadable = () => failure("unsupported_media", "The file could not be read as an MP4, MOV or WebM video.")

/** The clip's demuxer, from its first bytes; anything else is refused before a tool sees it. */
export const sniffDemuxer = (path: string) =>
  Effect.tryPromise(async () => {
    const file = await open(path, "r")
    try {
      const head = new Uint8Array(sniffLength)
      const { bytesRead } = await file.read(head, 0, sniffLength, 0)
      return sniffMediaKind(head.subarray(0, bytesRead))
    } finally {
      await file.close()
    }
  }).pipe(
    Effect.orElseSucceed(() => null),
    Effect.flatMap((kind) =>
      kind === null ? Effect.fail(unreadable()) : Effect.succeed<Demuxer>(kind === "webm" ? "matroska" : "mov")
    )
  )

/** The options before `-i` that pin the demuxer and keep reads on the local file. */
export const inputOptions = (demuxer: Demuxer, config: ScorerConfig) => [
  "-protocol_whitelist", "file", "-format_whitelist", allowedDemuxers, "-f", demuxer,
  "-threads", String(config.toolThreads)
]

/** ffmpeg's decoders refuse a frame past SCORER_MAX_PIXELS too (a size the headers did not state). */
export const decodeOptions = (config: ScorerConfig) => ["-max_pixels", String(config.maxPixels)]

/** A command run under an address-space limit (prlimit), or as it is where prlimit is missing. */
export const memoryCapped = (prlimit: string | null, bytes: number) => (command: ReadonlyArray<string>) =>
  prlimit === null ? command : [prlimit, `--as=${bytes}`, "--", ...command]

export const isVideoStream = (stream: ProbeOutput["streams"][number]) =>
  stream.codec_type === "video" && stream.disposition?.attached_pic !== 1

export const probe = (run: Run, path: string, tool: string, demuxer: Demuxer, config: ScorerConfig) =>
  Effect.gen(function*() {
    const result = yield* run(
      [tool, ...inputOptions(demuxer, config), "-skip_frame", "all", "-v", "error", "-print_format", "json", "-show_format", "-show_streams", path],
      null
    )
    if (result.exitCode !== 0) {
      yield* Effect.logDebug("ffprobe refused the file").pipe(Effect.annotateLogs("stderr", result.stderr.slice(0, 500)))
      return yield* unreadable()
    }
    return yield* Schema.decodeUnknownEffect(Schema.fromJsonString(ProbeOutput))(result.stdout).pipe(Effect.mapError(unreadable))
  })

/** Refuses a frame larger than SCORER_MAX_PIXELS, from the sizes ffprobe read in the headers. */
export const checkFrameSize = (video: ProbeOutput["streams"][number], maxPixels: number) => {
  const [width, height] = [video.width ?? 0, video.height ?? 0]
  return width * height > maxPixels
    ? Effect.fail(failure(
      "unsupported_media",
      `The video's frames are ${width}x${height} (${width * height} pixels); at most ${maxPixels} pixels a frame are scored.`
    ))
    : Effect.void
}

export const measureDuration = (
  run: Run,
  path: string,
  tool: string,
  probed: ProbeOutput,
  videoIndex: number,
  options: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const stated = probed.format?.duration ?? probed.streams.find((s) => s.index === videoIndex)?.duration
    if (stated !== undefined && Number.isFinite(stated) && stated > 0) return stated
    const packets = yield* run(
      [tool, ...options, "-v", "error", "-select_streams", `${videoIndex}`, "-show_entries", "packet=pts_time,duration_time", "-of", "csv=p=0", path],
      null
    )
    return packets.exitCode === 0 ? parsePacketSpan(packets.stdout) : null
  })
