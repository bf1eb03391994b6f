/**
 * Real video files for the scorer tests, made with ffmpeg when a test file starts: small
 * (320x240, a few seconds) so the suite stays fast, each with its cut at a known time.
 * ffmpeg is FFMPEG_PATH, else the system's, else the npm-installed one (as the scorer finds it).
 */
import ffmpegInstaller from "@ffmpeg-installer/ffmpeg"
import ffprobeInstaller from "@ffprobe-installer/ffprobe"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { tempDir } from "./tempDirs.js"

export const ffmpegPath = process.env.FFMPEG_PATH ?? Bun.which("ffmpeg") ?? ffmpegInstaller.path
export const ffprobePath = process.env.FFPROBE_PATH ?? Bun.which("ffprobe") ?? ffprobeInstaller.path

export interface Clip {
  readonly path: string
  /** Frames per second of the video stream (one frame is the tolerance on cut times). */
  readonly fps: number
  /** Seconds from the first frame to the first hard cut; null when the opening has none. */
  readonly cutSec: number | null
  readonly durationSec: number
}

const run = async (args: ReadonlyArray<string>, stdoutTo?: string) => {
  const child = Bun.spawn([ffmpegPath, "-hide_banner", "-v", "error", "-y", ...args], {
    stdin: "ignore",
    stdout: stdoutTo === undefined ? "ignore" : Bun.file(stdoutTo),
    stderr: "pipe"
  })
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`ffmpeg ${args.join(" ")} failed: ${stderr}`)
}

const lavfi = (source: string) => ["-f", "lavfi", "-i", source]

/** Shot A (testsrc2: moving pattern, bright) for `cut` seconds, then shot B (mandelbrot: dark, different). */
const twoShots = (size: string, fps: number, cut: number, total: number, audio?: string) => [
  ...lavfi(`testsrc2=size=${size}:rate=${fps}:duration=${cut}`),
  ...lavfi(`mandelbrot=size=${size}:rate=${fps}`),
  ...(audio === undefined ? [] : [...lavfi(audio), "-map", "2:a", "-t", String(total)]),
  "-filter_complex",
  `[1:v]trim=duration=${total - cut},setpts=PTS-STARTPTS[b];[0:v][b]concat=n=2:v=1[v]`,
  "-map",
  "[v]"
]

const h264 = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]

/**
 * Replaces the Segment's Duration element (id 44 89, an 8-byte float) with a Void element of the
 * same size: the file then looks like a WebM recorded live (MediaRecorder), with no duration.
 */
const stripWebmDuration = (path: string) => {
  const bytes = readFileSync(path)
  const at = bytes.indexOf(Buffer.from([0x44, 0x89, 0x88]))
  if (at === -1) throw new Error("no Duration element in the WebM")
  Buffer.from([0xec, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0]).copy(bytes, at)
  writeFileSync(path, bytes)
}

export interface ClipSet {
  readonly dir: string
  /** H.264 MP4 with AAC audio, cut at 1.6 s. */
  readonly cutMp4: Clip
  /** H.264 in a QuickTime MOV (30 fps, no audio), cut at 2.4 s. */
  readonly cutMov: Clip
  /** VP9 + Opus WebM written live (no duration in the file), cut at 1.0 s. */
  readonly cutWebm: Clip
  /** One moving shot, no cut. */
  readonly noCut: Clip
  /** testsrc2 cross-dissolving into mandelbrot from 1 s to 2.5 s: no hard cut. */
  readonly dissolve: Clip
  /** Two flat colours of equal brightness (only the colour changes), cut at 1.2 s. */
  readonly colourCut: Clip
  /** A cut at 11 s, after the 10-second opening: none in the opening. */
  readonly lateCut: Clip
  /** The first half of cutMp4's bytes: the index (moov) is missing. */
  readonly truncated: Clip
  /** An MP4 holding only an audio track. */
  readonly audioOnly: Clip
  /** 190 seconds long (tiny frames, 1 fps). */
  readonly long: Clip
  /** Plain text. */
  readonly notVideo: Clip
}

export const makeClips = async (): Promise<ClipSet> => {
  const dir = tempDir("hookline-clips-")
  const at = (name: string) => join(dir, name)
  const size = "320x240"
  const clips = {
    dir,
    cutMp4: { path: at("cut.mp4"), fps: 25, cutSec: 1.6, durationSec: 3 },
    cutMov: { path: at("cut.mov"), fps: 30, cutSec: 2.4, durationSec: 3.5 },
    cutWebm: { path: at("cut.webm"), fps: 25, cutSec: 1.0, durationSec: 3 },
    noCut: { path: at("nocut.mp4"), fps: 25, cutSec: null, durationSec: 3 },
    dissolve: { path: at("dissolve.mp4"), fps: 25, cutSec: null, durationSec: 4 },
    colourCut: { path: at("colour.mp4"), fps: 25, cutSec: 1.2, durationSec: 3 },
    lateCut: { path: at("late.mp4"), fps: 10, cutSec: null, durationSec: 13 },
    truncated: { path: at("truncated.mp4"), fps: 25, cutSec: null, durationSec: 3 },
    audioOnly: { path: at("audio.mp4"), fps: 0, cutSec: null, durationSec: 2 },
    long: { path: at("long.mp4"), fps: 1, cutSec: null, durationSec: 190 },
    notVideo: { path: at("notes.txt"), fps: 0, cutSec: null, durationSec: 0 }
  } satisfies ClipSet

  const webmRaw = at("cut-live.webm")
  await Promise.all([
    run([
      ...twoShots(size, 25, 1.6, 3, "sine=frequency=440:sample_rate=48000"), ...h264, "-c:a", "aac", "-b:a", "96k", clips.cutMp4.path
    ]),
    run([...twoShots(size, 30, 2.4, 3.5), ...h264, "-f", "mov", clips.cutMov.path]),
    run([
      ...twoShots(size, 25, 1.0, 3, "sine=frequency=300:sample_rate=48000"),
      "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "300k", "-c:a", "libopus",
      "-f", "webm", "pipe:1"
    ], webmRaw).then(() => {
      writeFileSync(clips.cutWebm.path, readFileSync(webmRaw))
      stripWebmDuration(clips.cutWebm.path)
    }),
    run([...lavfi(`testsrc2=size=${size}:rate=25:duration=3`), ...h264, clips.noCut.path]),
    // A linear mix written with `blend` rather than `xfade`: the npm-bundled ffmpeg (4.1) has no xfade.
    run([
      ...lavfi(`testsrc2=size=${size}:rate=25:duration=4`),
      ...lavfi(`mandelbrot=size=${size}:rate=25`),
      "-filter_complex",
      "[1:v]trim=duration=4,setpts=PTS-STARTPTS[b];"
        + "[0:v][b]blend=all_expr='A*(1-clip((T-1)/1.5,0,1))+B*clip((T-1)/1.5,0,1)'[v]",
      "-map", "[v]", ...h264, clips.dissolve.path
    ]),
    // 0xC85A5A and 0x288CC8 have the same BT.601 luma (about 123).
    run([
      ...lavfi(`color=c=0xC85A5A:size=${size}:rate=25:duration=1.2`),
      ...lavfi(`color=c=0x288CC8:size=${size}:rate=25:duration=1.8`),
      "-filter_complex", "[0:v][1:v]concat=n=2:v=1[v]", "-map", "[v]", ...h264, clips.colourCut.path
    ]),
    run([...twoShots("160x120", 10, 11, 13), ...h264, clips.lateCut.path]),
    run([...lavfi("sine=frequency=440:sample_rate=48000:duration=2"), "-c:a", "aac", clips.audioOnly.path]),
    run([...lavfi("testsrc2=size=32x32:rate=1:duration=190"), ...h264, clips.long.path])
  ])
  const whole = readFileSync(clips.cutMp4.path)
  writeFileSync(clips.truncated.path, whole.subarray(0, Math.floor(whole.length / 2)))
  writeFileSync(clips.notVideo.path, "These are notes, not a video.\n".repeat(20))
  return clips
}
