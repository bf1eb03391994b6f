/**
 * Progress of a CLI import on stderr: a bar redrawn in place on a terminal, a plain line every
 * `intervalMs` otherwise (logs and CI keep a readable record), and a last line when it stops.
 */
export interface ProgressPoint {
  /** Input bytes consumed (skipped lines included). */
  readonly bytes: number
  /** Lines consumed (skipped lines included). */
  readonly lines: number
  /** Hooks written by this run. */
  readonly hooks: number
}

export interface ProgressOutput {
  readonly isTTY?: boolean
  readonly write: (text: string) => unknown
}

const mib = (bytes: number) => (bytes / 1_048_576).toFixed(0)
const thousands = (n: number) => Math.round(n).toLocaleString("en-US")

export class ProgressReporter {
  private readonly started = performance.now()
  /** A terminal's bar is drawn at once; a plain line first comes an interval after the start. */
  private lastDrawn: number
  /** The point of the last plain line: stop() does not write the same one again. */
  private lastWritten: ProgressPoint | null = null
  private last: ProgressPoint = { bytes: 0, lines: 0, hooks: 0 }
  private baseline: ProgressPoint | null = null

  constructor(
    private readonly label: string,
    private readonly total: { readonly bytes: number } | { readonly lines: number },
    private readonly out: ProgressOutput = process.stderr,
    private readonly intervalMs = Number(process.env.IMPORT_PROGRESS_INTERVAL_MS ?? 10_000)
  ) {
    this.lastDrawn = out.isTTY === true ? Number.NEGATIVE_INFINITY : this.started
  }

  private text(point: ProgressPoint): string {
    const done = "bytes" in this.total ? point.bytes : point.lines
    const total = "bytes" in this.total ? this.total.bytes : this.total.lines
    const fraction = total > 0 ? Math.min(1, done / total) : 1
    const seconds = (performance.now() - this.started) / 1000
    const rate = seconds > 0 ? point.hooks / seconds : 0
    // The rate of this run only: lines skipped by --from-line are not work done.
    const from = this.baseline ?? { bytes: 0, lines: 0, hooks: 0 }
    const doneHere = done - ("bytes" in this.total ? from.bytes : from.lines)
    const left = doneHere > 0 && fraction < 1 ? ` ${thousands(((total - done) / doneHere) * seconds)} s left,` : ""
    const amount = "bytes" in this.total ? `${mib(point.bytes)}/${mib(total)} MiB, ` : ""
    return `${this.label}: ${(fraction * 100).toFixed(1)}% (${amount}${thousands(point.lines)} lines),${left} ${thousands(rate)} hooks/s`
  }

  private bar(point: ProgressPoint): string {
    const done = "bytes" in this.total ? point.bytes / Math.max(1, this.total.bytes) : point.lines / Math.max(1, this.total.lines)
    const width = 30
    const filled = Math.round(Math.min(1, done) * width)
    return `\r[${"#".repeat(filled)}${".".repeat(width - filled)}] ${this.text(point)}\u001b[K`
  }

  /** Where this run starts in the input (after lines skipped by --from-line); set once. */
  begin(point: ProgressPoint): void {
    this.baseline ??= point
    if (this.last.lines === 0) this.last = point
  }

  update(point: ProgressPoint): void {
    this.last = point
    const now = performance.now()
    if (this.out.isTTY === true) {
      if (now - this.lastDrawn < 100) return
      this.out.write(this.bar(point))
    } else {
      if (now - this.lastDrawn < this.intervalMs) return
      this.out.write(this.text(point) + "\n")
      this.lastWritten = point
    }
    this.lastDrawn = now
  }

  stop(): void {
    if (this.out.isTTY === true) {
      this.out.write(this.bar(this.last) + "\n")
    } else if (this.lastWritten?.lines !== this.last.lines || this.lastWritten.bytes !== this.last.bytes) {
      this.out.write(this.text(this.last) + "\n")
    }
  }
}
