/**
 * Makes a short vertical test clip to score: `npm run clip [-- path.mp4]` prints the path it
 * wrote (by default a new hookline-clip-….mp4 in the temp directory, so the working tree stays
 * clean and two runs, or two users of one machine, never write the same file).
 *
 * Six seconds of 360x640 H.264 with a tone: a moving test pattern, a hard cut at 1.2 s to a
 * darker shot, and a hook burned in as a caption (white with a black outline, in the repository's
 * DejaVu font) so the prediction shows hook_text, a category and similar hooks. Made with the filters the npm-bundled ffmpeg has, so no system ffmpeg is needed
 * (FFMPEG_PATH, then an ffmpeg on PATH, are used first when there is one, as the scorer does).
 */
import ffmpegInstaller from "@ffmpeg-installer/ffmpeg"
import { randomBytes } from "node:crypto"
import { rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const ffmpeg = process.env.FFMPEG_PATH ?? Bun.which("ffmpeg") ?? ffmpegInstaller.path

// `npm run` starts scripts in the package's directory; a relative path means the caller's.
const callerDirectory = process.env.INIT_CWD ?? process.cwd()
const requested = process.argv[2]
const output = requested === undefined
  ? join(tmpdir(), `hookline-clip-${randomBytes(6).toString("hex")}.mp4`)
  : resolve(callerDirectory, requested)

const size = "360x640"
const caption = "Stop scrolling if you\nhate meal prep"
const font = join(import.meta.dir, "..", "test", "support", "fonts", "DejaVuSans-Bold.ttf")
const captionFile = `${output}.caption.txt`
writeFileSync(captionFile, caption)
const fps = 25
const cutSec = 1.2
const durationSec = 6

const child = Bun.spawn([
  ffmpeg, "-hide_banner", "-v", "error", "-y",
  "-f", "lavfi", "-i", `testsrc2=size=${size}:rate=${fps}:duration=${cutSec}`,
  "-f", "lavfi", "-i", `mandelbrot=size=${size}:rate=${fps}`,
  "-f", "lavfi", "-i", `sine=frequency=440:sample_rate=48000:duration=${durationSec}`,
  "-filter_complex", `[1:v]trim=duration=${durationSec - cutSec},setpts=PTS-STARTPTS[b];[0:v][b]concat=n=2:v=1,` +
    `drawtext=fontfile=${font}:textfile=${captionFile}:fontsize=26:fontcolor=white:borderw=2:bordercolor=black:` +
    `line_spacing=6:x=(w-tw)/2:y=h*0.3[v]`,
  "-map", "[v]", "-map", "2:a",
  "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "96k",
  "-movflags", "+faststart", output
], { stdin: "ignore", stdout: "ignore", stderr: "pipe" })

const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
rmSync(captionFile, { force: true })
if (code !== 0) {
  process.stderr.write(`ffmpeg (${ffmpeg}) could not make the clip:\n${stderr}`)
  process.exit(1)
}
process.stderr.write(`a ${durationSec} s ${size} clip with a cut at ${cutSec} s and the caption "${caption.replace("\n", " ")}", ${statSync(output).size} bytes:\n`)
process.stdout.write(`${output}\n`)
