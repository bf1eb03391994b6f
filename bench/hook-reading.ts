/**
 * Reading the on-screen hook: what it costs and how well it reads. A section of `npm run bench`
 * (`-- --only hook-reading`: the held-out clips), or alone:
 * `npx bun bench/hook-reading.ts [--cpu] [--styles] [--held-out] [--quick] [--root DIR]` (all three
 * parts without a flag; the held-out part needs the benchmark's Postgres).
 *
 * - "scorer CPU": a 15 s 1080x1920 H.264 clip (moving test footage, a burned-in two-line caption).
 *   Decode floor: ffmpeg decoding the 10 s opening and nothing else. Before: the previous analysis
 *   graph (bicubic scale to 360 lines, RGB, scene score, back to YUV, signalstats; full decoding).
 *   After: the scorer as it runs now (ffprobe + the one ffmpeg pass, its child CPU) and the text
 *   reading (this process's CPU, the OCR worker thread included). Then clips/s with 4 clients.
 * - "caption styles": word accuracy per caption style on the suite's own lines
 *   (test/support/captionStyles.ts), 12 clips a style (`--per-style N`), scored by the scorer
 *   itself (no server).
 * - "held-out": the clips of bench/support/heldOutClips.ts (15 a style over 8 styles and 12 with
 *   no caption; `--quick`: 3 and 3), lines the suite never reads, scored through the API of a
 *   server holding the 2,000-hook demo catalog. Word accuracy is 1 - word error rate of hook_text
 *   against the caption, per style; category top-1 against the line's category; and how many
 *   clips without a caption read as null. `--root DIR` scores them with another checkout's server
 *   (its node_modules installed): a before/after on the same clips.
 */
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { seedDemoDatabase } from "../src/Hooks/DemoCatalog.js"
import { wordsOf } from "../src/Predictions/HookText.js"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { captionClipDir, ffmpegPath, makeCaptionClip } from "../test/support/captionClips.js"
import { removeTempDirs } from "../test/support/tempDirs.js"
import { type CaptionStyleName, captionStyles, heldOutLines, styledClip, wordAccuracy } from "../test/support/captionStyles.js"
import { type HeldOutClip, heldOutClipFile, heldOutClips } from "./support/heldOutClips.js"
import { createAccounts, freshDatabase, type HooklineServer, repositoryRoot, startHookline } from "./support/processes.js"
import type { BenchOptions, ScenarioResult, SideResult } from "./support/report.js"

const servedHooks = 2_000

/**
 * The scorer in this process, its OCR worker kept for the run (a layer provided to each call would
 * stop the worker after it). What is measured is the reading, not its time cap: on a loaded machine
 * the default 3 s cap would stop the worker and count a fresh worker's start on every clip.
 */
const scorerRuntime = ManagedRuntime.make(
  ClipScorer.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { SCORER_TEXT_TIMEOUT: "60 seconds" } }))))
)

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
  const scorer = await scorerRuntime.runPromise(Effect.service(ClipScorer))
  await scorerRuntime.runPromise(scorer.score({ path: clip })) // starts the OCR worker
  const analysis: Array<number> = []
  const ocr: Array<number> = []
  let read: string | null = null
  for (let i = 0; i < 3; i++) {
    const [children, own] = [reapedChildrenCpuMs(), ownCpuMs()]
    const score = await scorerRuntime.runPromise(scorer.score({ path: clip }))
    analysis.push(reapedChildrenCpuMs() - children)
    ocr.push(ownCpuMs() - own)
    read = score.hook?.text ?? null
  }
  const started = performance.now()
  await Promise.all(Array.from({ length: 4 }, async () => {
    for (let i = 0; i < 3; i++) await scorerRuntime.runPromise(scorer.score({ path: clip }))
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

/** What one held-out clip gave: its hook_text and category through the API, and how long it took. */
interface HeldOutResult {
  readonly clip: HeldOutClip
  readonly read: string | null
  readonly category: string | null
  readonly ms: number
}

/** Scores `path` through the API: upload link, PUT, polled until finished. */
const scoreThroughApi = async (server: HooklineServer, key: string, path: string) => {
  const headers = { authorization: `Bearer ${key}` }
  const link = await (await fetch(`${server.url}/v1/predict/upload`, { method: "POST", headers })).json() as {
    upload_url: string
    prediction_id: string
  }
  await (await fetch(link.upload_url, { method: "PUT", body: Bun.file(path) })).arrayBuffer()
  const deadline = Date.now() + 180_000
  for (;;) {
    const body = await (await fetch(`${server.url}/v1/predict/${link.prediction_id}`, { headers })).json() as {
      status: string
      result: { hook_text: string | null; category: { slug: string } | null } | null
    }
    if (body.status === "succeeded" || body.status === "failed") return body.result
    if (Date.now() > deadline) throw new Error(`prediction ${link.prediction_id} did not finish`)
    await Bun.sleep(50)
  }
}

/**
 * The held-out clips (bench/support/heldOutClips.ts) scored through the API of a server holding
 * the 2,000-hook demo catalog, two clips in flight (one per worker). `root`: the checkout whose
 * server scores them (another commit's, for a before/after on the same clips).
 */
const scoreHeldOut = async (clips: ReadonlyArray<HeldOutClip>, root: string) => {
  const paths: Array<string> = []
  for (let i = 0; i < clips.length; i += 2) {
    paths.push(...await Promise.all(clips.slice(i, i + 2).map(heldOutClipFile)))
  }
  const databaseUrl = await freshDatabase("hookline_bench_hooks")
  // Reading is measured here, not the time cap: a loaded machine must not turn a reading into null.
  const server = await startHookline(databaseUrl, { WORKER_CONCURRENCY: "2", SCORER_TEXT_TIMEOUT: "30 seconds" }, join(root, "src/main.ts"))
  try {
    await seedDemoDatabase(databaseUrl, servedHooks)
    const [account] = await createAccounts(server, 1)
    const results: Array<HeldOutResult> = []
    let next = 0
    const started = performance.now()
    await Promise.all([0, 1].map(async () => {
      while (next < clips.length) {
        const index = next++
        const at = performance.now()
        const result = await scoreThroughApi(server, account.key, paths[index])
        results[index] = { clip: clips[index], read: result?.hook_text ?? null, category: result?.category?.slug ?? null, ms: performance.now() - at }
      }
    }))
    return { results, seconds: (performance.now() - started) / 1000 }
  } finally {
    await server.stop()
  }
}

const share = (part: number, whole: number) => (whole === 0 ? 0 : Math.round(part / whole * 1000) / 10)

/** The per-style table, the no-text clips and the category, from the held-out results. */
const heldOutSummary = (results: ReadonlyArray<HeldOutResult>) => {
  const captioned = results.filter((r) => r.clip.truth !== null)
  const styles = Object.keys(captionStyles) as Array<CaptionStyleName>
  const perStyle = styles.map((style) => {
    const group = captioned.filter((r) => r.clip.style === style)
    const accuracy = group.map((r) => wordAccuracy(wordsOf(r.clip.truth!), wordsOf(r.read ?? "")))
    return {
      style,
      clips: group.length,
      word_accuracy_pct: share(accuracy.reduce((a, b) => a + b, 0), group.length),
      read_nothing: group.filter((r) => r.read === null).length,
      category_top1: group.filter((r) => r.category === r.clip.category).length
    }
  })
  const noText = results.filter((r) => r.clip.truth === null)
  const categoryHits = captioned.filter((r) => r.category === r.clip.category).length
  const misread = captioned.filter((r) => wordAccuracy(wordsOf(r.clip.truth!), wordsOf(r.read ?? "")) < 1)
  const categoryMisses = captioned.filter((r) => r.category !== r.clip.category)
  return {
    perStyle,
    noText: { clips: noText.length, readAsNull: noText.filter((r) => r.read === null).length, read: noText.flatMap((r) => (r.read === null ? [] : [r.read])) },
    category: { clips: captioned.length, top1: categoryHits, top1_pct: share(categoryHits, captioned.length), nulls: captioned.filter((r) => r.category === null).length },
    misread: misread.map((r) => ({ clip: r.clip.name, truth: r.clip.truth, read: r.read })),
    categoryMisses: categoryMisses.map((r) => ({ truth: r.clip.category, got: r.category, read: r.read }))
  }
}

const printSummary = (summary: ReturnType<typeof heldOutSummary>, label: string) => {
  console.log(`hook reading on held-out clips (${label}): word accuracy per caption style`)
  console.log("| caption style | clips | word accuracy | read nothing | category top-1 |\n|---|---:|---:|---:|---:|")
  for (const row of summary.perStyle) {
    console.log(`| ${row.style} | ${row.clips} | ${row.word_accuracy_pct}% | ${row.read_nothing} | ${row.category_top1} of ${row.clips} |`)
  }
  console.log(`no text read as null: ${summary.noText.readAsNull} of ${summary.noText.clips}` +
    (summary.noText.read.length === 0 ? "" : ` (read: ${JSON.stringify(summary.noText.read)})`))
  console.log(`category top-1: ${summary.category.top1} of ${summary.category.clips} (${summary.category.top1_pct}%), null on ${summary.category.nulls}`)
}

/** Bench rows: one a caption style (word accuracy in the note), the no-text clips, the category. */
const heldOutScenarios = (results: ReadonlyArray<HeldOutResult>, seconds: number, summary: ReturnType<typeof heldOutSummary>): Array<ScenarioResult> => {
  const side = (group: ReadonlyArray<HeldOutResult>): SideResult => {
    const latencies = group.map((r) => r.ms).sort((a, b) => a - b)
    const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0
    return {
      ok: group.length, errors: 0, seconds, throughput: results.length / seconds,
      p50Ms: at(0.5), p90Ms: at(0.9), p99Ms: at(0.99), maxMs: at(1), firstError: null
    }
  }
  const operation = "held-out clip → hook_text, category"
  return [
    ...summary.perStyle.map((row) => ({
      scenario: `hook reading: ${row.style}`,
      operation,
      unit: "clips/s",
      hookline: side(results.filter((r) => r.clip.style === row.style)),
      baseline: null,
      note: `word accuracy ${row.word_accuracy_pct}% on ${row.clips} clips, ${row.read_nothing} read nothing, category top-1 ${row.category_top1} of ${row.clips}`
    })),
    {
      scenario: "hook reading: no text",
      operation,
      unit: "clips/s",
      hookline: side(results.filter((r) => r.clip.style === null)),
      baseline: null,
      note: `hook_text null on ${summary.noText.readAsNull} of ${summary.noText.clips} clips with no caption`
    },
    {
      scenario: "hook reading: category",
      operation,
      unit: "clips/s",
      hookline: side(results.filter((r) => r.clip.style !== null)),
      baseline: null,
      note: `category top-1 ${summary.category.top1} of ${summary.category.clips} (${summary.category.top1_pct}%), null on ${summary.category.nulls}`
    }
  ]
}

/** `npm run bench -- --only hook-reading`: the held-out clips (15 a style and 12 without text; `--quick`: 3 and 3). */
export const runHookReadingBench = async (options: BenchOptions, root = repositoryRoot): Promise<ReadonlyArray<ScenarioResult>> => {
  const clips = heldOutClips(options.quick ? { perStyle: 3, noText: 3 } : { perStyle: 15, noText: 12 })
  const { results, seconds } = await scoreHeldOut(clips, root)
  const summary = heldOutSummary(results)
  printSummary(summary, root === repositoryRoot ? "this checkout" : root)
  return heldOutScenarios(results, seconds, summary)
}

const perStyleArgument = process.argv.indexOf("--per-style")
const perStyle = perStyleArgument === -1 ? heldOutLines.length : Number(process.argv[perStyleArgument + 1])

/** Word accuracy of hook_text per caption style, and how many clips read nothing. */
const styleRows = async (dir: string) => {
  const scorer = await scorerRuntime.runPromise(Effect.service(ClipScorer))
  const rows: Array<{ style: string; clips: number; word_accuracy: number; nothing_read: number; cpu_ms_per_clip: number }> = []
  for (const style of Object.keys(captionStyles) as Array<CaptionStyleName>) {
    const accuracy: Array<number> = []
    let cpuMs = 0
    for (let i = 0; i < perStyle; i++) {
      const line = heldOutLines[i % heldOutLines.length]
      const path = await makeCaptionClip(join(dir, `style-${rows.length}-${i}.mp4`), styledClip(style, line, i))
      const [children, own] = [reapedChildrenCpuMs(), ownCpuMs()]
      const score = await scorerRuntime.runPromise(scorer.score({ path }))
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

if (import.meta.main) {
  const dir = captionClipDir()
  process.on("exit", removeTempDirs)
  const chosen = ["--cpu", "--styles", "--held-out"].filter((flag) => process.argv.includes(flag))
  const runs = (flag: string) => chosen.length === 0 || chosen.includes(flag)
  if (runs("--cpu")) console.log(JSON.stringify({ scenario: "hook reading: scorer CPU", ...(await cpuRows(dir)) }, null, 2))
  if (runs("--styles")) {
    console.log("hook reading: word accuracy per caption style (the suite's lines)")
    console.table(await styleRows(dir))
  }
  if (runs("--held-out")) {
    const rootArgument = process.argv.indexOf("--root")
    const root = rootArgument === -1 ? repositoryRoot : resolve(process.argv[rootArgument + 1])
    const clips = heldOutClips(process.argv.includes("--quick") ? { perStyle: 3, noText: 3 } : { perStyle: 15, noText: 12 })
    const summary = heldOutSummary((await scoreHeldOut(clips, root)).results)
    printSummary(summary, root === repositoryRoot ? "this checkout" : root)
    console.log(JSON.stringify({ misread: summary.misread, category_misses: summary.categoryMisses }, null, 2))
  }
  // The scorer's layer closes: its OCR worker stops and its cache directory goes.
  await scorerRuntime.dispose()
  process.exit(0)
}
