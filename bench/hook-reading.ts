/**
 * Reading the on-screen hook: what it costs and how well it reads. Run alone:
 * `npx bun bench/hook-reading.ts [--clips 60]` (needs the benchmark's Postgres for the accuracy part).
 *
 * - "scorer CPU": a 15 s 1080x1920 H.264 clip (moving test footage, a burned-in two-line caption).
 *   Decode floor: ffmpeg decoding the 10 s opening and nothing else. Before: the previous analysis
 *   graph (bicubic scale to 360 lines, RGB, scene score, back to YUV, signalstats; full decoding).
 *   After: the scorer as it runs now (ffprobe + the one ffmpeg pass, its child CPU) and the text
 *   reading (this process's CPU, the OCR worker thread included). Then clips/s with 4 clients.
 * - "caption styles": word accuracy per caption style (test/support/captionStyles.ts: white with and
 *   without an outline, dark on a light box, yellow, red, green, blue and pink with an outline),
 *   12 clips a style (`--per-style N`), each a hook line not in the demo catalog, alternately over
 *   still and moving footage and on one line or two; scored by the scorer itself (no server).
 * - "accuracy": clips the served catalog has not seen (demo hooks past the served 2,000, whose text
 *   is not among them), in two fonts, three sizes, four positions, flat or moving backgrounds,
 *   scored through the API of a server holding the demo catalog. Word accuracy of hook_text is
 *   1 - word error rate against the caption; category top-1 against the hook's own category.
 */
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { seedDemoDatabase } from "../src/Hooks/DemoCatalog.js"
import { demoHook } from "../src/Hooks/DemoData.js"
import { wordsOf } from "../src/Predictions/HookText.js"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { captionClipDir, ffmpegPath, makeCaptionClip } from "../test/support/captionClips.js"
import { type CaptionStyleName, captionStyles, heldOutLines, styledClip, wordAccuracy } from "../test/support/captionStyles.js"
import { createAccounts, freshDatabase, startHookline } from "./support/processes.js"

const servedHooks = 2_000
const clipsArgument = process.argv.indexOf("--clips")
const clipCount = clipsArgument === -1 ? 60 : Number(process.argv[clipsArgument + 1])

/** CPU milliseconds of a finished child process. */
const childCpuMs = async (args: ReadonlyArray<string>) => {
  const child = Bun.spawn([ffmpegPath, ...args], { stdin: "ignore", stdout: "ignore", stderr: "ignore" })
  await child.exited
  const usage = child.resourceUsage()!
  return Number(usage.cpuTime.user + usage.cpuTime.system) / 1000
}

/** CPU of this process's reaped children so far (ms), from /proc: what the scorer's ffprobe and ffmpeg used. */
const reapedChildrenCpuMs = () => {
  const fields = readFileSync("/proc/self/stat", "utf8").split(") ")[1].split(" ")
  return (Number(fields[13]) + Number(fields[14])) * 10
}

const ownCpuMs = () => {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1000
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

const cpuRows = async (dir: string) => {
  const clip = join(dir, "large.mp4")
  await makeCaptionClip(clip, {
    captions: [{ text: "Stop scrolling if you\nhate meal prep" }],
    width: 1080, height: 1920, durationSec: 15, fps: 30, fontSize: 80, background: "moving"
  })
  const window = ["-t", "10", "-i", clip]
  const oldGraph = "[0:0]scale=w=-2:h='min(ih,360)',format=gbrp,select='gte(scene\\,0)',scale,format=yuv420p,signalstats,metadata=mode=print:file=/dev/null[v]"
  const decode: Array<number> = []
  const before: Array<number> = []
  for (let i = 0; i < 3; i++) {
    decode.push(await childCpuMs(["-v", "error", ...window, "-f", "null", "-"]))
    before.push(await childCpuMs(["-v", "error", ...window, "-filter_complex", oldGraph, "-map", "[v]", "-f", "null", "-"]))
  }
  const scorer = await Effect.runPromise(Effect.service(ClipScorer).pipe(Effect.provide(ClipScorer.layer)))
  await Effect.runPromise(scorer.score({ path: clip })) // starts the OCR worker
  const analysis: Array<number> = []
  const ocr: Array<number> = []
  let read: string | null = null
  for (let i = 0; i < 3; i++) {
    const [children, own] = [reapedChildrenCpuMs(), ownCpuMs()]
    const score = await Effect.runPromise(scorer.score({ path: clip }))
    analysis.push(reapedChildrenCpuMs() - children)
    ocr.push(ownCpuMs() - own)
    read = score.hook?.text ?? null
  }
  const started = performance.now()
  await Promise.all(Array.from({ length: 4 }, async () => {
    for (let i = 0; i < 3; i++) await Effect.runPromise(scorer.score({ path: clip }))
  }))
  const clipsPerSecond = 12 / ((performance.now() - started) / 1000)
  const [floor, after, text] = [median(decode), median(analysis), median(ocr)]
  return {
    clip: "15 s 1080x1920 H.264 30 fps, moving footage, two-line caption",
    hook_text: read,
    decode_floor_cpu_ms: Math.round(floor),
    before_analysis_cpu_ms: Math.round(median(before)),
    before_ratio: Math.round(median(before) / floor * 100) / 100,
    after_analysis_cpu_ms: Math.round(after),
    after_ocr_cpu_ms: Math.round(text),
    after_ratio: Math.round((after + text) / floor * 100) / 100,
    clips_per_second_4_clients: Math.round(clipsPerSecond * 100) / 100
  }
}

/** Demo hooks the served catalog does not hold, text stripped to what the fonts draw. */
const heldOutHooks = (count: number) => {
  const served = new Set(Array.from({ length: servedHooks }, (_, i) => demoHook(i).text))
  const hooks: Array<{ text: string; category: string }> = []
  for (let index = 1_000_000; hooks.length < count; index++) {
    const hook = demoHook(index)
    if (hook.category === null || served.has(hook.text)) continue
    hooks.push({ text: hook.text.replace(/[^\x20-\x7e]/g, "").trim(), category: hook.category })
  }
  return hooks
}

/** Lines of at most `width` characters. */
const wrap = (text: string, width: number) =>
  text.split(" ").reduce<Array<string>>((lines, word) => {
    const last = lines[lines.length - 1]
    if (last !== undefined && last.length + 1 + word.length <= width) lines[lines.length - 1] = `${last} ${word}`
    else lines.push(word)
    return lines
  }, []).join("\n")

const accuracyRows = async (dir: string) => {
  const databaseUrl = await freshDatabase("hookline_bench_hooks")
  const server = await startHookline(databaseUrl, { WORKER_CONCURRENCY: "2" })
  try {
    await seedDemoDatabase(databaseUrl, servedHooks)
    const [account] = await createAccounts(server, 1)
    const hooks = heldOutHooks(clipCount)
    const sizes = [30, 34, 38]
    const tops = [0.15, 0.3, 0.5, 0.65]
    const colours = ["0x2f4858", "0x7a3b2e", "0x1d1d1d", "0x4f6d3a", "0x8a8a8a"]
    const outcomes = await Promise.all(hooks.map(async (hook, i) => {
      const fontSize = sizes[i % sizes.length]
      const moving = i % 2 === 1
      const path = await makeCaptionClip(join(dir, `held-${i}.mp4`), {
        captions: [{ text: wrap(hook.text, Math.floor(540 * 0.9 / (fontSize * 0.68))) }],
        font: i % 4 < 2 ? "sans" : "serif",
        fontSize,
        top: tops[i % tops.length],
        background: moving ? "moving" : "still",
        backgroundColour: colours[i % colours.length]
      })
      return { hook, moving, path }
    }))
    const scored = []
    for (const outcome of outcomes) {
      const link = await (await fetch(`${server.url}/v1/predict/upload`, {
        method: "POST",
        headers: { authorization: `Bearer ${account.key}` }
      })).json() as { upload_url: string; prediction_id: string }
      await (await fetch(link.upload_url, { method: "PUT", body: Bun.file(outcome.path) })).arrayBuffer()
      scored.push({ ...outcome, id: link.prediction_id })
    }
    const results: Array<(typeof scored)[number] & { result: { hook_text: string | null; category: { slug: string } | null } | null }> = []
    for (const clip of scored) {
      const deadline = Date.now() + 120_000
      for (;;) {
        const body = await (await fetch(`${server.url}/v1/predict/${clip.id}`, { headers: { authorization: `Bearer ${account.key}` } })).json() as {
          status: string
          result: { hook_text: string | null; category: { slug: string } | null } | null
        }
        if (body.status === "succeeded" || body.status === "failed") {
          results.push({ ...clip, result: body.result })
          break
        }
        if (Date.now() > deadline) throw new Error(`prediction ${clip.id} did not finish`)
        await Bun.sleep(100)
      }
    }
    const summary = (moving: boolean) => {
      const group = results.filter((result) => result.moving === moving)
      const accuracy = group.map((r) => wordAccuracy(wordsOf(r.hook.text), wordsOf(r.result?.hook_text ?? "")))
      return {
        clips: group.length,
        word_accuracy: Math.round(accuracy.reduce((a, b) => a + b, 0) / group.length * 1000) / 1000,
        category_top1: Math.round(group.filter((r) => r.result?.category?.slug === r.hook.category).length / group.length * 1000) / 1000,
        category_null: group.filter((r) => r.result?.category === null).length
      }
    }
    const misses = results
      .filter((r) => r.result?.category?.slug !== r.hook.category)
      .slice(0, 8)
      .map((r) => ({ truth: r.hook.category, got: r.result?.category?.slug ?? null, read: r.result?.hook_text }))
    return { clean: summary(false), moving: summary(true), all_category_top1: results.filter((r) => r.result?.category?.slug === r.hook.category).length / results.length, misses }
  } finally {
    await server.stop()
  }
}

const perStyleArgument = process.argv.indexOf("--per-style")
const perStyle = perStyleArgument === -1 ? heldOutLines.length : Number(process.argv[perStyleArgument + 1])

/** Word accuracy of hook_text per caption style, and how many clips read nothing. */
const styleRows = async (dir: string) => {
  const scorer = await Effect.runPromise(Effect.service(ClipScorer).pipe(Effect.provide(ClipScorer.layer)))
  const rows: Array<{ style: string; clips: number; word_accuracy: number; nothing_read: number; cpu_ms_per_clip: number }> = []
  for (const style of Object.keys(captionStyles) as Array<CaptionStyleName>) {
    const accuracy: Array<number> = []
    let cpuMs = 0
    for (let i = 0; i < perStyle; i++) {
      const line = heldOutLines[i % heldOutLines.length]
      const path = await makeCaptionClip(join(dir, `style-${rows.length}-${i}.mp4`), styledClip(style, line, i))
      const [children, own] = [reapedChildrenCpuMs(), ownCpuMs()]
      const score = await Effect.runPromise(scorer.score({ path }))
      cpuMs += reapedChildrenCpuMs() - children + ownCpuMs() - own
      accuracy.push(wordAccuracy(wordsOf(line), wordsOf(score.hook?.text ?? "")))
    }
    rows.push({
      style,
      clips: accuracy.length,
      word_accuracy: Math.round(accuracy.reduce((a, b) => a + b, 0) / accuracy.length * 1000) / 1000,
      nothing_read: accuracy.filter((value) => value === 0).length,
      cpu_ms_per_clip: Math.round(cpuMs / accuracy.length)
    })
  }
  return rows
}

const dir = captionClipDir()
const chosen = ["--cpu", "--styles", "--accuracy"].filter((flag) => process.argv.includes(flag))
const runs = (flag: string) => chosen.length === 0 || chosen.includes(flag)
if (runs("--cpu")) console.log(JSON.stringify({ scenario: "hook reading: scorer CPU", ...(await cpuRows(dir)) }, null, 2))
if (runs("--styles")) {
  console.log("hook reading: word accuracy per caption style")
  console.table(await styleRows(dir))
}
if (runs("--accuracy")) console.log(JSON.stringify({ scenario: "hook reading: accuracy on held-out hooks", ...(await accuracyRows(dir)) }, null, 2))
process.exit(0)
