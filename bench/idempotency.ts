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
import { type LoadResult, LoadTally, measureInto } from "./support/load.js"
import type { ScenarioResult } from "./support/report.js"

const concurrency = 32

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

export const runIdempotencyBench = async ({ quick }: { readonly quick: boolean }): Promise<Array<ScenarioResult>> => {
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

    const plain = new LoadTally()
    const idempotent = new LoadTally()
    const replay = new LoadTally()
    // A new key for every idempotent grant, across all rounds.
    const nextKey = accounts.map(() => 0)
    const measure = (tally: LoadTally, operation: (worker: number, iteration: number) => Promise<boolean>) => () =>
      measureInto(tally, { ...window, concurrency, operation })
    const forms = [
      measure(plain, (worker) => grant(server, accounts[worker], null)),
      measure(idempotent, (worker) => grant(server, accounts[worker], keyOf(worker, nextKey[worker]++))),
      measure(replay, (worker, i) => grant(server, accounts[worker], keyOf(worker, -1 - (i % answered)), true))
    ]
    for (let round = 0; round < rounds; round++) {
      for (let turn = 0; turn < forms.length; turn++) await forms[(round + turn) % forms.length]()
    }
    const results = { plain: plain.result(), idempotent: idempotent.result(), replay: replay.result() }

    const overhead = (result: LoadResult) =>
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
