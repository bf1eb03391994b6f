/**
 * Predictions bench: clips scored per second, end to end, on the real server (its own process,
 * real Postgres with LISTEN/NOTIFY, default worker pool: one per core).
 *
 * One job = POST /v1/predict/upload → PUT the clip to upload_url → wait until the job is
 * succeeded (a shared poller reads the jobs' status from the database every 20 ms, so waiting
 * adds no HTTP load). Clients run closed-loop; throughput counts the jobs that finished inside
 * the measured window, latency is upload-link-to-succeeded of those jobs.
 *
 * - "predict pipeline": a 15-second 1080x1920 H.264 + AAC clip (about 10 MB) and the real
 *   ffmpeg scorer. The baseline is the scorer alone on the same file, as many at once as the
 *   server has workers: the ceiling the media analysis sets on this machine.
 * - "predict pipeline, no-op scorer": the same server code with a scorer that answers at once
 *   (bench/support/noopScorerServer.ts): the pipeline's own ceiling (API, streamed upload,
 *   ledger reserve/settle, queue, workers, webhook outbox, file cleanup).
 *
 * Run alone: `bun bench/predictions.ts [--quick]`.
 */
import { Effect } from "effect"
import { existsSync, readFileSync, renameSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Pg from "pg"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { LatencyRecorder, type LoadResult } from "./support/load.js"
import { type BenchAccount, createAccounts, freshDatabase, type HooklineServer, startHookline } from "./support/processes.js"
import { type BenchOptions, benchSettings, type ScenarioResult } from "./support/report.js"

const workers = Math.max(1, navigator.hardwareConcurrency)

/** Its own database: workers of any other server on a shared one would claim these jobs. */
const benchDatabase = "hookline_bench_predictions"

// ---------------------------------------------------------------------------------------------
// The clip

const ffmpeg = process.env.FFMPEG_PATH ?? Bun.which("ffmpeg") ?? "ffmpeg"

/**
 * A 15-second vertical clip: a 1.5-second opening shot, a hard cut, a second shot (the same
 * moving pattern, inverted and hue-shifted), a 440 Hz tone. Made once and kept in the temp dir.
 */
const benchClip = async (): Promise<string> => {
  const path = join(tmpdir(), "hookline-bench-clip-1080x1920-15s-v1.mp4")
  if (existsSync(path)) return path
  const partial = `${path}.${process.pid}.part.mp4`
  const child = Bun.spawn([
    ffmpeg, "-hide_banner", "-v", "error", "-y",
    "-f", "lavfi", "-i", "testsrc2=size=1080x1920:rate=30:duration=1.5",
    "-f", "lavfi", "-i", "testsrc2=size=1080x1920:rate=30:duration=13.5",
    "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
    "-filter_complex", "[1:v]negate,hue=h=120[b];[0:v][b]concat=n=2:v=1[v]",
    "-map", "[v]", "-map", "2:a", "-t", "15",
    "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p", "-c:a", "aac",
    partial
  ], { stdout: "ignore", stderr: "pipe" })
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`making the bench clip failed: ${stderr}`)
  renameSync(partial, path)
  return path
}

// ---------------------------------------------------------------------------------------------
// Measuring

interface Window {
  readonly warmupMs: number
  readonly durationMs: number
  readonly concurrency: number
}

/**
 * Closed-loop clients for warm-up + window; counts operations that *finished* inside the window
 * (an operation may take longer than the window itself when jobs queue).
 */
const measure = async (window: Window, operation: (worker: number) => Promise<void>): Promise<LoadResult> => {
  const latencies = new LatencyRecorder()
  const start = performance.now()
  const windowStart = start + window.warmupMs
  const windowEnd = windowStart + window.durationMs
  let errors = 0
  let firstError: string | null = null
  const client = async (index: number) => {
    while (performance.now() < windowEnd) {
      const began = performance.now()
      try {
        await operation(index)
        const ended = performance.now()
        if (ended >= windowStart && ended <= windowEnd) latencies.record(ended - began)
      } catch (error) {
        const ended = performance.now()
        if (ended >= windowStart && ended <= windowEnd) errors++
        firstError ??= error instanceof Error ? error.message : String(error)
      }
    }
  }
  await Promise.all(Array.from({ length: window.concurrency }, (_, index) => client(index)))
  const seconds = window.durationMs / 1000
  const [p50Ms, p90Ms, p99Ms, maxMs] = latencies.percentiles(50, 90, 99, 100)
  return { ok: latencies.count, errors, seconds, throughput: latencies.count / seconds, p50Ms, p90Ms, p99Ms, maxMs, firstError }
}

/** Resolves jobs as they reach a terminal status, with one query for all of them. */
const completionPoller = (databaseUrl: string) => {
  const pool = new Pg.Pool({ connectionString: databaseUrl, max: 1 })
  const waiting = new Map<string, { resolve: () => void; reject: (error: Error) => void }>()
  let stopped = false
  const loop = (async () => {
    while (!stopped) {
      if (waiting.size > 0) {
        const { rows } = await pool.query<{ id: string; status: string; error_type: string | null }>(
          "SELECT id, status, error_type FROM predictions WHERE id = ANY($1) AND status IN ('succeeded', 'failed')",
          [[...waiting.keys()]]
        ).catch((error: unknown) => {
          console.error("predictions bench: status poll failed", error)
          return { rows: [] }
        })
        for (const row of rows) {
          const waiter = waiting.get(row.id)
          waiting.delete(row.id)
          if (row.status === "succeeded") waiter?.resolve()
          else waiter?.reject(new Error(`job failed: ${row.error_type}`))
        }
      }
      await Bun.sleep(20)
    }
  })()
  return {
    /** Resolves when the job succeeds; rejects when it fails or is not done within `deadlineMs`. */
    done: (predictionId: string, deadlineMs = 120_000) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.delete(predictionId)
          reject(new Error(`job ${predictionId} not done within ${deadlineMs / 1000} s`))
        }, deadlineMs)
        waiting.set(predictionId, {
          resolve: () => {
            clearTimeout(timer)
            resolve()
          },
          reject: (error) => {
            clearTimeout(timer)
            reject(error)
          }
        })
      }),
    stop: async () => {
      stopped = true
      await loop
      await pool.end()
    }
  }
}

/** One job end to end: link, upload, scored. */
const pipelineJob = (server: HooklineServer, account: BenchAccount, clip: Uint8Array<ArrayBuffer>, done: (id: string) => Promise<void>) =>
async () => {
  const created = await fetch(`${server.url}/v1/predict/upload`, {
    method: "POST",
    headers: { authorization: `Bearer ${account.key}` }
  })
  if (created.status !== 200) throw new Error(`POST /v1/predict/upload: ${created.status} ${await created.text()}`)
  const link = (await created.json()) as { upload_url: string; prediction_id: string }
  const uploaded = await fetch(link.upload_url, { method: "PUT", body: clip })
  if (uploaded.status !== 200) throw new Error(`PUT upload_url: ${uploaded.status} ${await uploaded.text()}`)
  await uploaded.arrayBuffer()
  await done(link.prediction_id)
}

// ---------------------------------------------------------------------------------------------
// Servers

const runPipeline = async (server: HooklineServer, clip: Uint8Array<ArrayBuffer>, window: Window) => {
  const [account] = await createAccounts(server, 1)
  const poller = completionPoller(server.databaseUrl)
  try {
    return await measure(window, pipelineJob(server, account, clip, poller.done))
  } finally {
    await poller.stop()
  }
}

/** The scorer alone on the clip, `workers` at once (in this process; ffmpeg runs in its own). */
const scorerAlone = async (path: string, window: Window) => {
  const scorer = await Effect.runPromise(
    Effect.service(ClipScorer).pipe(Effect.provide(ClipScorer.layer))
  )
  return measure(window, async () => {
    await Effect.runPromise(scorer.score({ path }))
  })
}

export const runPredictionsBench = async (options: BenchOptions): Promise<Array<ScenarioResult>> => {
  const settings = benchSettings(options)
  const clipPath = await benchClip()
  const clip = new Uint8Array(readFileSync(clipPath))
  const sizeMb = (clip.length / 1024 / 1024).toFixed(1)
  // Real analysis takes about a second of CPU per clip: longer windows, and twice as many clients
  // as workers so every worker always has the next clip uploaded.
  const scored: Window = {
    warmupMs: options.quick ? 1_500 : 5_000,
    durationMs: options.quick ? 5_000 : 30_000,
    concurrency: workers * 2
  }

  const real = await (async () => {
    const server = await startHookline(await freshDatabase(benchDatabase))
    try {
      return await runPipeline(server, clip, scored)
    } finally {
      await server.stop()
    }
  })()
  const alone = await scorerAlone(clipPath, { ...scored, concurrency: workers })
  const noop = await (async () => {
    const server = await startHookline(await freshDatabase(benchDatabase), {}, "bench/support/noopScorerServer.ts")
    try {
      return await runPipeline(server, clip, settings)
    } finally {
      await server.stop()
    }
  })()

  return [
    {
      scenario: "predict pipeline",
      operation: `upload link → PUT 15 s 1080x1920 clip (${sizeMb} MB) → scored, ${scored.concurrency} clients`,
      unit: "clips/s",
      hookline: real,
      baseline: alone,
      note: `${workers} workers (one per core). Baseline: the ffmpeg scorer alone on the same file, ${workers} at once.`
    },
    {
      scenario: "predict pipeline, no-op scorer",
      operation: `the same with a scorer that answers at once, ${settings.concurrency} clients`,
      unit: "clips/s",
      hookline: noop,
      baseline: null,
      note: "the pipeline's own ceiling: API, streamed upload, ledger reserve/settle, queue, workers, outbox, file cleanup."
    }
  ]
}

if (import.meta.main) {
  const rows = await runPredictionsBench({ quick: process.argv.includes("--quick") })
  console.log(JSON.stringify(rows, null, 2))
}
