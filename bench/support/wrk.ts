/**
 * HTTP load from a native generator: wrk (one thread, `concurrency` connections) cycling through
 * a fixed list of requests, so the client does not eat the server's core the way a JavaScript
 * load loop does. When wrk is missing the bench installs it with apt-get once; where that fails
 * it falls back to the JavaScript generator (bench/support/load.ts), and the row says so.
 *
 * Beside throughput and latency, every HTTP row reports the CPU the *server process* spent per
 * request (user + system time from /proc/<pid>/stat over the measured window ÷ requests), the
 * figure that shows what each layer of the request path costs.
 */
import { spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type HttpRequestSpec, httpOperation, type LoadResult, runLoad } from "./load.js"

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ; 100 on Linux). */
const ticksPerSecond = (() => {
  const answer = spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" })
  const ticks = Number(answer.stdout?.trim())
  return Number.isFinite(ticks) && ticks > 0 ? ticks : 100
})()

/** CPU milliseconds (user + system) `pid` has used so far, or null off Linux. */
export const processCpuMs = (pid: number): number | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // Fields after the command name (which may hold spaces), counted from field 3.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return ((Number(fields[11]) + Number(fields[12])) / ticksPerSecond) * 1000
  } catch {
    return null
  }
}

let wrkPath: string | null | undefined

/** The wrk binary: on PATH, else apt-get installed once (bench only), else null. */
export const findWrk = (): string | null => {
  if (wrkPath !== undefined) return wrkPath
  wrkPath = Bun.which("wrk")
  if (wrkPath === null && process.env.BENCH_NO_INSTALL !== "1" && Bun.which("apt-get") !== null) {
    console.error("[bench] wrk is missing: apt-get install wrk")
    spawnSync("sh", ["-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk"], { stdio: "ignore" })
    wrkPath = Bun.which("wrk")
  }
  if (wrkPath === null) console.error("[bench] wrk not available: HTTP rows use the JavaScript load generator")
  return wrkPath
}

const luaString = (text: string) => `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`

/** A wrk script that cycles through `requests` and prints its summary as one JSON line. */
const script = (requests: ReadonlyArray<HttpRequestSpec>) => {
  const formatted = requests.map((spec) => {
    const headers = Object.entries(spec.headers ?? {}).map(([name, value]) => `[${luaString(name)}] = ${luaString(value)}`).join(", ")
    const body = typeof spec.body === "string" ? luaString(spec.body) : "nil"
    return `wrk.format(${luaString(spec.method ?? "GET")}, ${luaString(spec.path)}, { ${headers} }, ${body})`
  })
  return `
local requests = {}
init = function(args)
  ${formatted.map((line) => `requests[#requests + 1] = ${line}`).join("\n  ")}
end
local index = 0
request = function()
  index = index + 1
  if index > #requests then index = 1 end
  return requests[index]
end
done = function(summary, latency, _)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests":%d,"duration_us":%d,"status_errors":%d,"socket_errors":%d,"p50":%d,"p90":%d,"p99":%d,"max":%d}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
`
}

interface WrkSummary {
  readonly requests: number
  readonly duration_us: number
  readonly status_errors: number
  readonly socket_errors: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly max: number
}

const runWrkOnce = async (wrk: string, scriptPath: string, url: string, connections: number, durationMs: number): Promise<WrkSummary> => {
  const seconds = Math.max(1, Math.round(durationMs / 1000))
  const child = Bun.spawn([wrk, "-t1", `-c${connections}`, `-d${seconds}s`, "--timeout", "10s", "-s", scriptPath, url], {
    stdout: "pipe",
    stderr: "pipe"
  })
  const [output, errors] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()])
  await child.exited
  const line = output.split("\n").find((text) => text.startsWith("WRK_JSON "))
  if (line === undefined) throw new Error(`wrk printed no summary (exit ${child.exitCode}): ${errors || output}`)
  return JSON.parse(line.slice("WRK_JSON ".length)) as WrkSummary
}

export interface HttpLoadOptions {
  readonly url: string
  /** Requests sent in turn (each connection takes the next one). */
  readonly requests: ReadonlyArray<HttpRequestSpec>
  readonly concurrency: number
  readonly warmupMs: number
  readonly durationMs: number
  /** The server process, for CPU per request; null leaves the figure out. */
  readonly serverPid: number | null
  /** Status every answer must have (default 200); others count as errors. */
  readonly expectStatus?: number
}

export interface HttpLoadResult extends LoadResult {
  /** Server CPU milliseconds per answered request in the window, or null when not measured. */
  readonly cpuMsPerRequest: number | null
  readonly generator: "wrk" | "js"
}

/**
 * Warm-up, then the measured window, with wrk when it is available. wrk counts any status of
 * 400 or more as an error; the JavaScript generator counts any status other than `expectStatus`.
 */
export const runHttpLoad = async (options: HttpLoadOptions): Promise<HttpLoadResult> => {
  const wrk = findWrk()
  const cpuBefore = () => (options.serverPid === null ? null : processCpuMs(options.serverPid))
  if (wrk === null || (options.expectStatus ?? 200) !== 200) {
    const { durationMs, warmupMs, concurrency } = options
    let before: number | null = null
    setTimeout(() => (before = cpuBefore()), warmupMs)
    const result = await runLoad({
      concurrency,
      warmupMs,
      durationMs,
      operation: httpOperation(options.url, (_worker, iteration) => options.requests[iteration % options.requests.length], options.expectStatus)
    })
    const after = cpuBefore()
    return {
      ...result,
      cpuMsPerRequest: before === null || after === null || result.ok === 0 ? null : (after - before) / (result.ok + result.errors),
      generator: "js"
    }
  }
  const directory = mkdtempSync(join(tmpdir(), "hookline-wrk-"))
  try {
    const scriptPath = join(directory, "requests.lua")
    writeFileSync(scriptPath, script(options.requests))
    if (options.warmupMs > 0) await runWrkOnce(wrk, scriptPath, options.url, options.concurrency, options.warmupMs)
    const before = cpuBefore()
    const summary = await runWrkOnce(wrk, scriptPath, options.url, options.concurrency, options.durationMs)
    const after = cpuBefore()
    const seconds = summary.duration_us / 1e6
    const errors = summary.status_errors + summary.socket_errors
    const ok = Math.max(0, summary.requests - summary.status_errors)
    return {
      ok,
      errors,
      seconds,
      throughput: ok / seconds,
      p50Ms: summary.p50 / 1000,
      p90Ms: summary.p90 / 1000,
      p99Ms: summary.p99 / 1000,
      maxMs: summary.max / 1000,
      firstError: errors > 0 ? `${summary.status_errors} answers with status ≥ 400, ${summary.socket_errors} socket errors` : null,
      cpuMsPerRequest: before === null || after === null || summary.requests === 0 ? null : (after - before) / summary.requests,
      generator: "wrk"
    }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}
