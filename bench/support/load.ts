/**
 * The load generator every scenario uses: a fixed number of concurrent workers, each running one
 * operation after another (closed loop, like wrk's connections) for a warm-up and then a fixed
 * measured window. Operations that finish inside the window are counted (throughput) and their
 * latencies kept exactly and reduced to percentiles; long operations (a scored clip) count in
 * the window they finish in, as wrk counts responses.
 *
 * An operation is any async function (an HTTP request over loopback, or a direct database call),
 * so the Hookline side and the baseline side of a scenario are measured by the same code.
 */

export interface LoadOptions {
  /** Operations in flight at once (HTTP: open keep-alive connections). */
  readonly concurrency: number
  /** Run, unmeasured, before the window (JIT, pools and caches warm up). */
  readonly warmupMs: number
  /** The measured window. */
  readonly durationMs: number
  /** One operation; resolves true when it succeeded. `worker` is 0..concurrency-1. */
  readonly operation: (worker: number, iteration: number) => Promise<boolean>
}

export interface LoadResult {
  /** Operations that finished successfully inside the window. */
  readonly ok: number
  /** Operations that failed (a wrong status, a thrown error) inside the window. */
  readonly errors: number
  readonly seconds: number
  /** Successful operations per second. */
  readonly throughput: number
  readonly p50Ms: number
  readonly p90Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** The first failure seen, to say what went wrong. */
  readonly firstError: string | null
}

/** Latencies in milliseconds, kept exactly (a growable typed array), reduced on demand. */
export class LatencyRecorder {
  private values = new Float64Array(1 << 16)
  private size = 0

  record(ms: number) {
    if (this.size === this.values.length) {
      const grown = new Float64Array(this.values.length * 2)
      grown.set(this.values)
      this.values = grown
    }
    this.values[this.size++] = ms
  }

  get count() {
    return this.size
  }

  /** Nearest-rank percentiles of everything recorded. */
  percentiles(...ranks: ReadonlyArray<number>): Array<number> {
    if (this.size === 0) return ranks.map(() => Number.NaN)
    const sorted = this.values.slice(0, this.size).sort()
    return ranks.map((rank) => sorted[Math.min(this.size - 1, Math.max(0, Math.ceil((rank / 100) * this.size) - 1))])
  }
}

/**
 * What one or more measured windows of a scenario saw. A scenario measured in interleaved rounds
 * (bench/idempotency.ts) adds each round's window to the same tally.
 */
export class LoadTally {
  readonly latencies = new LatencyRecorder()
  ok = 0
  errors = 0
  seconds = 0
  firstError: string | null = null

  result(): LoadResult {
    const [p50Ms, p90Ms, p99Ms, maxMs] = this.latencies.percentiles(50, 90, 99, 100)
    const { ok, errors, seconds, firstError } = this
    return { ok, errors, seconds, throughput: ok / seconds, p50Ms, p90Ms, p99Ms, maxMs, firstError }
  }
}

/** Runs one warm-up and measured window of `options`, adding what it measured to `tally`. */
export const measureInto = async (tally: LoadTally, options: LoadOptions): Promise<void> => {
  const windowStart = performance.now() + options.warmupMs
  const windowEnd = windowStart + options.durationMs

  const worker = async (index: number) => {
    for (let iteration = 0; ; iteration++) {
      const began = performance.now()
      if (began >= windowEnd) return
      let succeeded: boolean
      try {
        succeeded = await options.operation(index, iteration)
        if (!succeeded) tally.firstError ??= "operation reported failure"
      } catch (error) {
        succeeded = false
        tally.firstError ??= error instanceof Error ? error.message : String(error)
      }
      const ended = performance.now()
      if (ended < windowStart || ended > windowEnd) continue
      if (succeeded) {
        tally.ok++
        tally.latencies.record(ended - began)
      } else {
        tally.errors++
      }
    }
  }

  await Promise.all(Array.from({ length: options.concurrency }, (_, index) => worker(index)))
  tally.seconds += options.durationMs / 1000
}

export const runLoad = async (options: LoadOptions): Promise<LoadResult> => {
  const tally = new LoadTally()
  await measureInto(tally, options)
  return tally.result()
}

export interface HttpRequestSpec {
  readonly method?: string
  readonly path: string
  readonly headers?: Record<string, string>
  readonly body?: BodyInit
}

/**
 * An HTTP operation against `baseUrl`: `request(worker, iteration)` says what to send; it
 * succeeds when the status is `expectStatus` (default 200). The body is always read, so the
 * connection goes back to the keep-alive pool.
 */
export const httpOperation = (
  baseUrl: string,
  request: (worker: number, iteration: number) => HttpRequestSpec,
  expectStatus = 200
) =>
async (worker: number, iteration: number): Promise<boolean> => {
  const spec = request(worker, iteration)
  const response = await fetch(baseUrl + spec.path, {
    method: spec.method ?? "GET",
    headers: spec.headers,
    body: spec.body
  })
  await response.arrayBuffer()
  if (response.status !== expectStatus) throw new Error(`${spec.method ?? "GET"} ${spec.path}: status ${response.status}`)
  return true
}
