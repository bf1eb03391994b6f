/**
 * Clips with a caption burned in, as short-form videos put their hook on screen: white text with
 * a black border, in a font from this repository (test/support/fonts), so every machine makes
 * the same frames. Made with ffmpeg's drawtext (the npm-bundled ffmpeg has freetype).
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ffmpegPath } from "./clips.js"

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

export interface CaptionClipOptions {
  readonly captions: ReadonlyArray<Caption>
  readonly font?: keyof typeof fonts
  /** Pixels, on a clip `width` wide. */
  readonly fontSize?: number
  /** Where the caption's top sits, as a share of the height. */
  readonly top?: number
  /** still: a flat colour; moving: a moving test pattern; gradient: a slowly moving soft pattern. */
  readonly background?: "still" | "moving" | "gradient"
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
    case "gradient":
      return `mandelbrot=size=${size}:rate=${fps}:end_pts=${duration}`
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
  const drawn = options.captions.map((caption, i) => {
    const textFile = `${path}.caption${i}.txt`
    writeFileSync(textFile, caption.text)
    const enable = `:enable='between(t,${caption.from ?? 0},${caption.until ?? duration})'`
    return `drawtext=fontfile=${fonts[options.font ?? "sans"]}:textfile=${textFile}:fontsize=${fontSize}` +
      `:fontcolor=white:borderw=${Math.max(2, Math.round(fontSize / 16))}:bordercolor=black:line_spacing=${Math.round(fontSize / 4)}` +
      `:x=(w-tw)/2:y=h*${options.top ?? 0.3}${enable}`
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

export const captionClipDir = () => mkdtempSync(join(tmpdir(), "hookline-captions-"))
