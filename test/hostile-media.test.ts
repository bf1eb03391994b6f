/**
 * Clips crafted against the media tools and the text reader: each is refused or bounded, the
 * job's outcome is what a user is told (and refunded), and the next ordinary clip is still read.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer, Result } from "effect"
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { HookReader } from "../src/Predictions/HookReader.js"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { captionClipDir, fonts, makeCaptionClip } from "./support/captionClips.js"
import { ffmpegPath, ffprobePath } from "./support/clips.js"
import { createLink, expectReceived, expectWallet, fastBackground, journalOf, put, waitForStatus } from "./support/predictions.js"
import { startTestServer } from "./support/server.js"

const ffmpeg = async (args: ReadonlyArray<string>) => {
  const child = Bun.spawn([ffmpegPath, "-hide_banner", "-v", "error", "-y", ...args], { stdin: "ignore", stdout: "ignore", stderr: "pipe" })
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`ffmpeg ${args.join(" ")}: ${stderr}`)
}

let dir: string
/** 2048x2048 (past the default 1920x1920 area), 0.4 s: small to make, large to decode. */
let huge: string
/** 16384x200, under the pixel bound, with a caption: its text frames would be 16384 pixels long. */
let wide: string
/** An ordinary caption clip, read after the hostile ones. */
let plain: string
beforeAll(async () => {
  dir = captionClipDir()
  huge = join(dir, "huge.mp4")
  wide = join(dir, "wide.mp4")
  const h264 = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
  await Promise.all([
    ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=2048x2048:rate=5", "-t", "0.4", ...h264, huge]),
    ffmpeg([
      "-f", "lavfi", "-i", "color=c=0x2f4858:size=16384x200:rate=5", "-t", "1",
      "-vf", `drawtext=fontfile=${fonts.sans}:text='Nobody talks about index funds':fontsize=60:fontcolor=white:x=300:y=70`,
      ...h264, wide
    ]),
    makeCaptionClip(join(dir, "plain.mp4"), { captions: [{ text: "Nobody talks about index funds" }], fontSize: 30, durationSec: 2 })
      .then((path) => {
        plain = path
      })
  ])
})
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** A stand-in for ffmpeg or ffprobe that leaves a mark when it runs, then fails. */
const markingTool = (name: string) => {
  const path = join(dir, name)
  writeFileSync(path, `#!/bin/sh\ntouch '${path}.ran'\nexit 1\n`)
  chmodSync(path, 0o755)
  return { path, ran: () => existsSync(`${path}.ran`) }
}

const settings = (env: Record<string, string>) => ConfigProvider.layer(ConfigProvider.fromEnv({ env }))

const scoreWith = (env: Record<string, string>, path: string) =>
  Effect.runPromise(Effect.flatMap(ClipScorer, (scorer) => Effect.result(scorer.score({ path }))).pipe(
    Effect.provide(ClipScorer.layer.pipe(Layer.provide(settings(env))))
  ))

const failureOf = (result: Result.Result<unknown, { readonly type: string; readonly message: string }>) =>
  Result.isFailure(result) ? { type: result.failure.type, message: result.failure.message } : "scored"

describe("clips crafted against the media tools", () => {
  test("a clip past SCORER_MAX_PIXELS fails as unsupported_media, refunded, and the next clip is read", async () => {
    const server = await startTestServer({ ...fastBackground, WORKER_CONCURRENCY: "1", SCORER_TEXT_TIMEOUT: "60 seconds" })
    try {
      const owner = await server.account({ plan: "pro", monthly_balance: 100 })
      const link = await createLink(server, owner.key)
      expectReceived(await put(link.upload_url, readFileSync(huge)), link)
      const failed = await waitForStatus(server, owner.key, link.prediction_id, "failed")
      expect(failed.error).toEqual({
        type: "unsupported_media",
        message: "The video's frames are 2048x2048 (4194304 pixels); at most 3686400 pixels a frame are scored."
      })
      expect(await journalOf(server.db, link.prediction_id)).toEqual([
        { entry_type: "reserve", bucket: "monthly", amount: -20 },
        { entry_type: "release", bucket: "monthly", amount: 20 }
      ])
      await expectWallet(server.db, owner.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })

      const next = await createLink(server, owner.key)
      expectReceived(await put(next.upload_url, readFileSync(plain)), next)
      const read = await waitForStatus(server, owner.key, next.prediction_id, "succeeded")
      expect(read.result?.hook_text).toBe("Nobody talks about index funds")
      await expectWallet(server.db, owner.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    } finally {
      await server.close()
    }
  })

  test("the frame size is checked before anything is decoded: ffmpeg never runs on such a clip", async () => {
    const decoder = markingTool("ffmpeg-mark")
    const result = await scoreWith({ FFMPEG_PATH: decoder.path, FFPROBE_PATH: ffprobePath, SCORER_MAX_PIXELS: "1000000" }, huge)
    expect(failureOf(result)).toMatchObject({ type: "unsupported_media", message: expect.stringContaining("2048x2048") })
    expect(decoder.ran()).toBe(false)
  })

  test("a playlist (or any file that is not MP4, MOV or WebM by its first bytes) reaches neither tool", async () => {
    const playlist = join(dir, "playlist.mp4")
    writeFileSync(playlist, `#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile://${plain}\n#EXT-X-ENDLIST\n`)
    const [prober, decoder] = [markingTool("ffprobe-mark-2"), markingTool("ffmpeg-mark-2")]
    const result = await scoreWith({ FFMPEG_PATH: decoder.path, FFPROBE_PATH: prober.path }, playlist)
    expect(failureOf(result)).toEqual({ type: "unsupported_media", message: "The file could not be read as an MP4, MOV or WebM video." })
    expect(prober.ran()).toBe(false)
    expect(decoder.ran()).toBe(false)
  })

  test("a very wide clip is read from frames capped by area (SCORER_TEXT_FRAME_AREA), and scores", async () => {
    const handed: Array<Uint8Array> = []
    const recording = Layer.succeed(HookReader, HookReader.of({
      enabled: true,
      read: (frames) => Effect.sync(() => handed.push(...frames)).pipe(Effect.as(null))
    }))
    const score = await Effect.runPromise(Effect.flatMap(ClipScorer, (scorer) => scorer.score({ path: wide })).pipe(
      Effect.provide(ClipScorer.withReader.pipe(Layer.provide(recording), Layer.provide(settings({}))))
    ))
    expect(score.features).toMatchObject({ width: 16384, height: 200 })
    expect(handed.length).toBeGreaterThan(0)
    for (const frame of handed) {
      const [width, height] = new TextDecoder().decode(frame.subarray(0, 32)).split(/\s+/).slice(1, 3).map(Number)
      expect(width * height).toBeLessThanOrEqual(540 * 960)
      expect(width / height).toBeCloseTo(16384 / 200, -1)
    }
  })
})

describe("a reading past SCORER_TEXT_TIMEOUT", () => {
  /** A frame crammed with small print (seconds of recognition), and a caption frame (a fraction of one). */
  const frame = async (name: string, text: string, fontSize: number, colours: string) => {
    const path = join(dir, name)
    const textFile = `${path}.txt`
    writeFileSync(textFile, text)
    await ffmpeg([
      "-f", "lavfi", "-i", `color=c=${colours.split(":")[0]}:size=540x960`, "-frames:v", "1",
      "-vf", `drawtext=fontfile=${fonts.sans}:textfile=${textFile}:fontsize=${fontSize}:fontcolor=${colours.split(":")[1]}:x=4:y=4:line_spacing=2,format=gray`,
      "-f", "image2", "-c:v", "pgm", path
    ])
    return readFileSync(path)
  }

  test("stops the OCR worker and starts a fresh one: the next clip is read", async () => {
    const words = ["lorem", "ipsum", "dolor", "quick", "brown", "fox", "jumps", "lazy", "caption", "video"]
    const print = Array.from({ length: 70 }, (_, line) =>
      Array.from({ length: 12 }, (_, i) => words[(line * 7 + i * 3) % words.length]).join(" ")).join("\n")
    const dense = await frame("dense.pgm", print, 12, "white:black")
    const caption = await frame("caption.pgm", "Nobody talks about\nindex funds", 40, "white:black")
    const readings = await Effect.runPromise(Effect.gen(function*() {
      const reader = yield* HookReader
      const crafted = yield* reader.read([dense, dense, dense])
      const next = yield* reader.read([caption])
      return { crafted, next }
    }).pipe(Effect.provide(HookReader.layer.pipe(Layer.provide(settings({ SCORER_TEXT_TIMEOUT: "4 seconds" }))))))
    expect(readings.crafted).toBeNull()
    expect(readings.next?.text).toBe("Nobody talks about index funds")
  }, 120_000)
})
