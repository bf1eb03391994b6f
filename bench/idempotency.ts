/**
 * The price of a safe retry: POST /admin/accounts/{id}/credits over real HTTP on the local
 * Postgres, 32 concurrent callers, each on its own account (so the wallet row lock is not what
 * is measured), in three forms:
 * - plain grant: no Idempotency-Key (the reference point);
 * - idempotent grant: a new Idempotency-Key on every call: claim row inserted, grant, answer
 *   sealed and stored (one INSERT and one UPDATE more than the plain grant);
 * - replay: a key already answered: one claim attempt and one read, no grant.
 * Each form reports ops/s and latency percentiles; the rows put the plain grant on the baseline
 * side, so the ratio column is the throughput kept with idempotency.
 *
 * Run alone: `bun bench/idempotency.ts [--quick]`.
 */
import { randomBytes } from "node:crypto"
import { startTestServer, type TestServer } from "../test/support/server.js"

export interface IdempotencyLoadResult {
  readonly ok: number
  readonly errors: number
  readonly seconds: number
  /** Successful grants per second. */
  readonly throughput: number
  readonly p50Ms: number
  readonly p90Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly firstError: string | null
}

/** One row per form, in the shape bench/run.ts tabulates (scenario, operation, unit, two sides). */
export interface IdempotencyScenario {
  readonly scenario: string
  readonly operation: string
  readonly unit: string
  readonly hookline: IdempotencyLoadResult
  readonly baseline: IdempotencyLoadResult
  readonly note?: string
}

const concurrency = 32

const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]

interface Tally {
  readonly latencies: Array<number>
  ok: number
  errors: number
  seconds: number
  firstError: string | null
}

const newTally = (): Tally => ({ latencies: [], ok: 0, errors: 0, seconds: 0, firstError: null })

/** `concurrency` workers calling `operation` back to back for one window; only calls inside it count. */
const measureInto = async (
  tally: Tally,
  window: { readonly warmupMs: number; readonly durationMs: number },
  operation: (worker: number, iteration: number) => Promise<boolean>,
  iterations: Array<number>
) => {
  const windowStart = performance.now() + window.warmupMs
  const windowEnd = windowStart + window.durationMs
  await Promise.all(Array.from({ length: concurrency }, async (_, worker) => {
    while (true) {
      const began = performance.now()
      if (began >= windowEnd) return
      let succeeded = false
      try {
        succeeded = await operation(worker, iterations[worker]++)
        if (!succeeded) tally.firstError ??= "unexpected answer"
      } catch (error) {
        tally.firstError ??= error instanceof Error ? error.message : String(error)
      }
      const ended = performance.now()
      if (began < windowStart || ended > windowEnd) continue
      if (succeeded) {
        tally.ok++
        tally.latencies.push(ended - began)
      } else {
        tally.errors++
      }
    }
  }))
  tally.seconds += window.durationMs / 1000
}

const summary = (tally: Tally): IdempotencyLoadResult => {
  const sorted = [...tally.latencies].sort((a, b) => a - b)
  const round = (value: number) => Number(value.toFixed(3))
  return {
    ok: tally.ok,
    errors: tally.errors,
    seconds: tally.seconds,
    throughput: Math.round(tally.ok / tally.seconds),
    p50Ms: round(percentile(sorted, 50)),
    p90Ms: round(percentile(sorted, 90)),
    p99Ms: round(percentile(sorted, 99)),
    maxMs: round(sorted[sorted.length - 1] ?? Number.NaN),
    firstError: tally.firstError
  }
}

const grant = async (server: TestServer, accountId: string, idempotencyKey: string | null, expectReplay = false) => {
  const response = await fetch(`${server.url}/admin/accounts/${accountId}/credits`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${server.adminToken}`,
      "content-type": "application/json",
      ...(idempotencyKey === null ? {} : { "idempotency-key": idempotencyKey })
    },
    body: JSON.stringify({ bucket: "topup", amount: 1 })
  })
  await response.arrayBuffer()
  return response.status === 200 && (response.headers.get("idempotent-replayed") === "true") === expectReplay
}

export const runIdempotencyBench = async ({ quick }: { readonly quick: boolean }): Promise<Array<IdempotencyScenario>> => {
  // The three forms take turns in short rounds, so a machine busy with something else for a
  // while slows all of them alike instead of whichever ran then.
  const rounds = quick ? 3 : 6
  const window = { warmupMs: quick ? 300 : 1_000, durationMs: quick ? 800 : 2_500 }
  const server = await startTestServer({ PG_MAX_CONNECTIONS: "10" })
  try {
    const accounts: Array<string> = []
    for (let i = 0; i < concurrency; i++) accounts.push((await server.account({ plan: "enterprise", topup_balance: 0 })).accountId)
    const run = randomBytes(4).toString("hex")
    const keyOf = (worker: number, iteration: number) => `bench-${run}-${worker}-${iteration}`
    // Keys the replay form repeats: answered before any measuring.
    const answered = 50
    await Promise.all(accounts.map(async (accountId, worker) => {
      for (let i = 0; i < answered; i++) await grant(server, accountId, keyOf(worker, -1 - i))
    }))

    const plain = newTally()
    const idempotent = newTally()
    const replay = newTally()
    const idempotentIterations = accounts.map(() => 0)
    const forms = [
      () => measureInto(plain, window, (worker) => grant(server, accounts[worker], null), accounts.map(() => 0)),
      () => measureInto(idempotent, window, (worker, i) => grant(server, accounts[worker], keyOf(worker, i)), idempotentIterations),
      () =>
        measureInto(
          replay,
          window,
          (worker, i) => grant(server, accounts[worker], keyOf(worker, -1 - (i % answered)), true),
          accounts.map(() => 0)
        )
    ]
    for (let round = 0; round < rounds; round++) {
      for (let turn = 0; turn < forms.length; turn++) await forms[(round + turn) % forms.length]()
    }
    const results = { plain: summary(plain), idempotent: summary(idempotent), replay: summary(replay) }

    const overhead = (result: IdempotencyLoadResult) =>
      `p50 ${(result.p50Ms - results.plain.p50Ms).toFixed(2)} ms over a plain grant, ` +
      `${Math.round((result.throughput / results.plain.throughput) * 100)}% of its throughput`
    const operation = `POST /admin/accounts/{id}/credits, ${concurrency} callers`
    return [
      {
        scenario: "idempotent grant",
        operation: `${operation}, new Idempotency-Key each`,
        unit: "req/s",
        hookline: results.idempotent,
        baseline: results.plain,
        note: `baseline = the same grant without a key; ${overhead(results.idempotent)}`
      },
      {
        scenario: "idempotent replay",
        operation: `${operation}, key already answered`,
        unit: "req/s",
        hookline: results.replay,
        baseline: results.plain,
        note: `baseline = a plain grant; a replay runs no grant: ${overhead(results.replay)}`
      }
    ]
  } finally {
    await server.close()
  }
}

if (import.meta.main) {
  const rows = await runIdempotencyBench({ quick: process.argv.includes("--quick") })
  console.log(JSON.stringify(rows, null, 2))
}
