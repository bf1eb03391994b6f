/** What a scenario reports, the shared run settings, the table and bench/results.json. */
import type { LoadResult } from "./load.js"

export interface BenchOptions {
  /** Short windows (`npm run bench -- --quick`): the whole run stays under 2 minutes. */
  readonly quick: boolean
  /** Overrides the warm-up (`npm run bench -- --warmup 3`). */
  readonly warmupMs?: number
}

/**
 * Window lengths and concurrency every scenario uses, so rows compare. The warm-up is 10 s
 * because Bun's JIT keeps compiling a server's request path for about that long under load:
 * with 3 s, Hookline's JIT thread still spent ~0.1 ms of CPU per wallet request in a first
 * window, and its main thread ~25% more than once warm (bench/README.md, "Where a request's CPU goes").
 */
export const benchSettings = ({ quick, warmupMs }: BenchOptions) => ({
  warmupMs: warmupMs ?? (quick ? 250 : 10_000),
  durationMs: quick ? 1_200 : 15_000,
  /** Concurrent connections (HTTP) or operations (direct), like wrk's -c. */
  concurrency: 32
})

/** The middle value (the mean of the two middle ones for an even count). */
export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/** One side of a row; HTTP rows also carry the server's CPU per request (bench/support/wrk.ts). */
export type SideResult = LoadResult & {
  readonly cpuMsPerRequest?: number | null
  /** HTTP rows: each measured window's throughput, the two sides' windows taking turns (wrk.ts, runPairedHttpLoad). */
  readonly roundThroughputs?: ReadonlyArray<number>
}

export interface ScenarioResult {
  /** Short name, as in the issue: wallet, categories, metered search, ... */
  readonly scenario: string
  /** What one operation is, e.g. "GET /v1/wallet, 32 keys". */
  readonly operation: string
  /** The throughput unit: req/s for HTTP, ops/s for direct calls, clips/s, deliveries/s. */
  readonly unit: string
  readonly hookline: SideResult | null
  readonly baseline: SideResult | null
  /** Why a side is missing, or what to keep in mind when reading the row. */
  readonly note?: string
}

export const ratio = (row: ScenarioResult): number | null =>
  row.hookline === null || row.baseline === null || row.baseline.throughput === 0
    ? null
    : row.hookline.throughput / row.baseline.throughput

const number = (value: number | undefined, digits = 0) =>
  value === undefined || Number.isNaN(value)
    ? "-"
    : value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })

const ms = (value: number | undefined) =>
  value === undefined || Number.isNaN(value) ? "-" : value < 10 ? number(value, 2) : value < 100 ? number(value, 1) : number(value, 0)

const cpu = (side: SideResult | null) =>
  side?.cpuMsPerRequest === undefined || side.cpuMsPerRequest === null ? "-" : number(side.cpuMsPerRequest, 3)

/** One plain-text table, Markdown-compatible, one row per scenario. */
export const renderTable = (rows: ReadonlyArray<ScenarioResult>): string => {
  const header = [
    "scenario",
    "operation",
    "Hookline",
    "p50 ms",
    "p99 ms",
    "CPU ms/req",
    "baseline",
    "p50 ms",
    "p99 ms",
    "CPU ms/req",
    "ratio",
    "errors"
  ]
  const lines = rows.map((row) => {
    const r = ratio(row)
    const errors = (row.hookline?.errors ?? 0) + (row.baseline?.errors ?? 0)
    return [
      row.scenario,
      row.operation,
      row.hookline === null ? "n/a" : `${number(row.hookline.throughput, row.hookline.throughput < 100 ? 1 : 0)} ${row.unit}`,
      ms(row.hookline?.p50Ms),
      ms(row.hookline?.p99Ms),
      cpu(row.hookline),
      row.baseline === null ? "n/a" : `${number(row.baseline.throughput, row.baseline.throughput < 100 ? 1 : 0)} ${row.unit}`,
      ms(row.baseline?.p50Ms),
      ms(row.baseline?.p99Ms),
      cpu(row.baseline),
      r === null ? "-" : `${number(r, 2)}×`,
      String(errors)
    ]
  })
  const widths = header.map((cell, column) => Math.max(cell.length, ...lines.map((line) => line[column].length)))
  const numeric = new Set([2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
  const format = (cells: ReadonlyArray<string>) =>
    `| ${cells.map((cell, column) => (numeric.has(column) ? cell.padStart(widths[column]) : cell.padEnd(widths[column]))).join(" | ")} |`
  const rule = `|${widths.map((width, column) => (numeric.has(column) ? `${"-".repeat(width + 1)}:` : "-".repeat(width + 2))).join("|")}|`
  const notes = rows.filter((row) => row.note !== undefined).map((row) => `- ${row.scenario}: ${row.note}`)
  return [format(header), rule, ...lines.map(format), ...(notes.length > 0 ? ["", ...notes] : [])].join("\n")
}

/** A row for a scenario whose bench module is absent or failed. */
export const unavailable = (scenario: string, operation: string, note: string): ScenarioResult => ({
  scenario,
  operation,
  unit: "req/s",
  hookline: null,
  baseline: null,
  note
})
