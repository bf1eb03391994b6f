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
import { median } from "./report.js"

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

/** Runs `use` with one wrk script per request list, written to a temporary directory removed after. */
const withScripts = async <A>(requestLists: ReadonlyArray<ReadonlyArray<HttpRequestSpec>>, use: (paths: Array<string>) => Promise<A>): Promise<A> => {
  const directory = mkdtempSync(join(tmpdir(), "hookline-wrk-"))
  try {
    return await use(requestLists.map((requests, index) => {
      const path = join(directory, `requests-${index}.lua`)
      writeFileSync(path, script(requests))
      return path
    }))
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
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

/** How long wrk waits for an answer before it counts a socket error, unless a row asks for longer. */
const defaultTimeoutSeconds = 10

const runWrkOnce = async (
  wrk: string,
  scriptPath: string,
  url: string,
  connections: number,
  durationMs: number,
  timeoutSeconds = defaultTimeoutSeconds
): Promise<WrkSummary> => {
  const seconds = Math.max(1, Math.round(durationMs / 1000))
  const child = Bun.spawn([wrk, "-t1", `-c${connections}`, `-d${seconds}s`, "--timeout", `${timeoutSeconds}s`, "-s", scriptPath, url], {
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
  /** Requests of the warm-up when they must differ from the measured ones (default: `requests`). */
  readonly warmupRequests?: ReadonlyArray<HttpRequestSpec>
  readonly concurrency: number
  readonly warmupMs: number
  readonly durationMs: number
  /** The server process, for CPU per request; null leaves the figure out. */
  readonly serverPid: number | null
  /** Status every answer must have (default 200); others count as errors. */
  readonly expectStatus?: number
  /** wrk's wait for one answer (default 10 s); a side that answers in seconds needs more. */
  readonly timeoutSeconds?: number
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
  return withScripts([options.requests, options.warmupRequests ?? options.requests], async ([scriptPath, warmupPath]) => {
    if (options.warmupMs > 0) await runWrkOnce(wrk, warmupPath, options.url, options.concurrency, options.warmupMs, options.timeoutSeconds)
    return measuredWindow(wrk, scriptPath, options, options.durationMs)
  })
}

/** One measured wrk window on a warm server, with the server's CPU over it. */
const measuredWindow = async (
  wrk: string,
  scriptPath: string,
  side: { readonly url: string; readonly serverPid: number | null; readonly concurrency: number; readonly timeoutSeconds?: number },
  durationMs: number
): Promise<HttpLoadResult> => {
  const cpu = () => (side.serverPid === null ? null : processCpuMs(side.serverPid))
  const before = cpu()
  const summary = await runWrkOnce(wrk, scriptPath, side.url, side.concurrency, durationMs, side.timeoutSeconds)
  const after = cpu()
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
}

/** Measured windows per side of a paired HTTP row, unless the row asks for another count. */
export const pairedRounds = 5

/** One side of a paired comparison: a server and the requests it is sent. */
export interface PairedSide {
  readonly url: string
  readonly serverPid: number | null
  readonly requests: ReadonlyArray<HttpRequestSpec>
  /** The warm-up's requests when they must differ from the measured ones (a row where every query is new). */
  readonly warmupRequests?: ReadonlyArray<HttpRequestSpec>
}

/** A side's figures over the rounds: each is the median of its rounds; `roundThroughputs` shows the spread. */
export type PairedResult = HttpLoadResult & { readonly roundThroughputs: ReadonlyArray<number> }

const combineRounds = (rounds: ReadonlyArray<HttpLoadResult>): PairedResult => {
  const cpu = rounds.map((round) => round.cpuMsPerRequest)
  const errors = rounds.reduce((sum, round) => sum + round.errors, 0)
  return {
    ok: rounds.reduce((sum, round) => sum + round.ok, 0),
    errors,
    seconds: rounds.reduce((sum, round) => sum + round.seconds, 0),
    throughput: median(rounds.map((round) => round.throughput)),
    p50Ms: median(rounds.map((round) => round.p50Ms)),
    p90Ms: median(rounds.map((round) => round.p90Ms)),
    p99Ms: median(rounds.map((round) => round.p99Ms)),
    maxMs: Math.max(...rounds.map((round) => round.maxMs)),
    firstError: rounds.find((round) => round.firstError !== null)?.firstError ?? null,
    cpuMsPerRequest: cpu.every((value) => value !== null) ? median(cpu as Array<number>) : null,
    generator: "wrk",
    roundThroughputs: rounds.map((round) => Math.round(round.throughput))
  }
}

/**
 * Both sides of a row, interleaved: each warmed up, then `rounds` windows of durationMs/rounds
 * each, taking turns (A B, B A, A B, ...), every figure the median of a side's rounds. Two sides
 * measured one after the other for 15 s each differed by up to 60% from run to run on the 2-core
 * machine (whatever else the machine did in that minute landed on one side); taking turns gives
 * both sides the same minutes. Without wrk, or with one round, the sides run one after the other.
 */
export const runPairedHttpLoad = async (
  sides: readonly [PairedSide, PairedSide],
  settings: {
    readonly concurrency: number
    readonly warmupMs: number
    readonly durationMs: number
    readonly rounds?: number
    readonly timeoutSeconds?: number
  }
): Promise<readonly [PairedResult, PairedResult]> => {
  const wrk = findWrk()
  const rounds = settings.rounds ?? pairedRounds
  // One round is the old way: each side warmed up and measured, one after the other.
  if (wrk === null || rounds === 1) {
    const one = async (side: PairedSide) => {
      const result = await runHttpLoad({ ...settings, ...side })
      return { ...result, roundThroughputs: [Math.round(result.throughput)] }
    }
    return [await one(sides[0]), await one(sides[1])]
  }
  return withScripts([...sides.map((side) => side.requests), ...sides.map((side) => side.warmupRequests ?? side.requests)], async (scripts) => {
    for (const [index, side] of sides.entries()) {
      if (settings.warmupMs > 0) await runWrkOnce(wrk, scripts[sides.length + index], side.url, settings.concurrency, settings.warmupMs, settings.timeoutSeconds)
    }
    const results: [Array<HttpLoadResult>, Array<HttpLoadResult>] = [[], []]
    const windowMs = Math.max(1_000, settings.durationMs / rounds)
    for (let round = 0; round < rounds; round++) {
      for (const index of round % 2 === 0 ? [0, 1] : [1, 0]) {
        const side = { ...sides[index], concurrency: settings.concurrency, timeoutSeconds: settings.timeoutSeconds }
        results[index].push(await measuredWindow(wrk, scripts[index], side, windowMs))
      }
    }
    return [combineRounds(results[0]), combineRounds(results[1])] as const
  })
}
