/**
 * Clips with a caption burned in, as short-form videos put their hook on screen (white text with
 * a black border unless a style says otherwise: a colour, no outline, dark text on a light box),
 * in a font from this repository (test/support/fonts), so every machine makes the same frames.
 * Made with ffmpeg's drawtext (the npm-bundled ffmpeg has freetype).
 */
import ffmpegInstaller from "@ffmpeg-installer/ffmpeg"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { tempDir } from "./tempDirs.js"

/**
 * ffmpeg as the scorer finds it (FFMPEG_PATH, the system's, the npm-installed one); found here
 * rather than through clips.ts so the benchmarks can make caption clips outside the test runner.
 */
export const ffmpegPath = process.env.FFMPEG_PATH ?? Bun.which("ffmpeg") ?? ffmpegInstaller.path

export const fonts = {
  sans: join(import.meta.dir, "fonts", "DejaVuSans-Bold.ttf"),
  serif: join(import.meta.dir, "fonts", "DejaVuSerif-Bold.ttf")
} as const

export interface Caption {
  /** Lines joined with "\n". */
  readonly text: string
  /** Seconds the caption shows from and until (default: the whole clip). */
  readonly from?: number
  readonly until?: number
}

/** How the caption is drawn: its colour, its outline (none: null), and a box behind it. */
export interface CaptionStyle {
  readonly colour?: string
  readonly outline?: string | null
  readonly box?: string
}

export interface CaptionClipOptions {
  readonly captions: ReadonlyArray<Caption>
  readonly style?: CaptionStyle
  readonly font?: keyof typeof fonts
  /** Another font file (a system font), in place of `font`. */
  readonly fontFile?: string
  /** Pixels, on a clip `width` wide. */
  readonly fontSize?: number
  /** Where the caption's top sits, as a share of the height. */
  readonly top?: number
  /** Where the caption's left edge sits, as a share of the width (default: centred). */
  readonly left?: number
  /**
   * still: a flat colour; moving: a moving test pattern; gradient: soft colour bands, slowly moving;
   * footage: the moving test pattern blurred, at half saturation and a little darker (soft colours
   * and shapes like filmed footage, its own digits unreadable); dimmed: the same footage darkened,
   * as creators dim footage under a caption that has no outline; pattern: the moving test pattern
   * without its timecode (moving footage with no text in it).
   */
  readonly background?: "still" | "moving" | "gradient" | "footage" | "dimmed" | "pattern"
  readonly backgroundColour?: string
  readonly width?: number
  readonly height?: number
  readonly durationSec?: number
  readonly fps?: number
}

const backgroundSource = (options: CaptionClipOptions, size: string, fps: number, duration: number) => {
  switch (options.background ?? "still") {
    case "moving":
      return `testsrc2=size=${size}:rate=${fps}:duration=${duration}`
    case "footage":
    case "dimmed": {
      const brightness = options.background === "dimmed" ? -0.35 : -0.1
      return `testsrc2=size=${size}:rate=${fps}:duration=${duration},boxblur=8:2,eq=saturation=0.5:brightness=${brightness}`
    }
    case "pattern": {
      // testsrc2 prints a timecode in its top-left corner: drawn larger and cropped past it.
      const [width, height] = size.split("x").map(Number)
      return `testsrc2=size=${width + 240}x${height + 80}:rate=${fps}:duration=${duration},crop=${width}:${height}:240:80`
    }
    case "gradient":
      // ffmpeg's gradients source (not in the npm-bundled 2018 build); a fixed seed, the same colours every run.
      return `gradients=size=${size}:rate=${fps}:duration=${duration}:speed=0.05:seed=7:nb_colors=3`
    case "still":
      return `color=c=${options.backgroundColour ?? "0x2f4858"}:size=${size}:rate=${fps}:duration=${duration}`
  }
}

/** Writes an H.264 MP4 with the captions to `path` (files for the caption texts go beside it). */
export const makeCaptionClip = async (path: string, options: CaptionClipOptions): Promise<string> => {
  const width = options.width ?? 540
  const height = options.height ?? 960
  const fps = options.fps ?? 25
  const duration = options.durationSec ?? 3
  const fontSize = options.fontSize ?? Math.round(width / 13.5)
  const style = options.style ?? {}
  const outline = style.outline === null
    ? ""
    : `:borderw=${Math.max(2, Math.round(fontSize / 16))}:bordercolor=${style.outline ?? "black"}`
  const box = style.box === undefined ? "" : `:box=1:boxcolor=${style.box}:boxborderw=${Math.round(fontSize / 3)}`
  const drawn = options.captions.map((caption, i) => {
    const textFile = `${path}.caption${i}.txt`
    writeFileSync(textFile, caption.text)
    const enable = `:enable='between(t,${caption.from ?? 0},${caption.until ?? duration})'`
    return `drawtext=fontfile=${options.fontFile ?? fonts[options.font ?? "sans"]}:textfile=${textFile}:fontsize=${fontSize}` +
      `:fontcolor=${style.colour ?? "white"}${outline}${box}:line_spacing=${Math.round(fontSize / 4)}` +
      `:x=${options.left === undefined ? "(w-tw)/2" : `w*${options.left}`}:y=h*${options.top ?? 0.3}${enable}`
  })
  const source = backgroundSource(options, `${width}x${height}`, fps, duration)
  const child = Bun.spawn([
    ffmpegPath, "-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", source, "-t", String(duration),
    "-vf", drawn.length === 0 ? "null" : drawn.join(","),
    "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", path
  ], { stdin: "ignore", stdout: "ignore", stderr: "pipe" })
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`ffmpeg could not make ${path}: ${stderr}`)
  return path
}

export const captionClipDir = () => tempDir("hookline-captions-")
