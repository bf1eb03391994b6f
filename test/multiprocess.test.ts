/**
 * Two `bun src/main.ts` processes on one database, each running the whole background (workers,
 * dispatcher, sweepers). Predictions, searches, lists, hook gets and webhooks are driven through
 * both at once; then: every job ran once, every delivery attempt was made once, and every
 * account's ledger balances to the credit.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import Pg from "pg"
import { adminClient, type Deployment, deployment, importWordCatalog, type ServerProcess, smallClip, spawnServer, submitClip } from "./support/process.js"
import { eventually, type Receiver, startReceiver } from "./support/receiver.js"
import { createDatabase, dropDatabase, type HookPage, ledgerState, testPool, type UploadLink } from "./support/server.js"

let shared: Deployment
let db: Pg.Pool
let receiver: Receiver
let a: ServerProcess
let b: ServerProcess

const env = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  WEBHOOK_ALLOW_INSECURE: "true",
  // Seven attempts per delivery, more than the failures scripted below (see failNext).
  WEBHOOK_RETRY_SCHEDULE: "200ms,200ms,200ms,200ms,200ms,200ms",
  WEBHOOK_POLL_INTERVAL: "200ms",
  // Not a test of the search timeout: on a loaded machine a search can pass the default 3 s (a 503).
  SEARCH_TIMEOUT: "60 seconds",
  WORKER_CONCURRENCY: "2",
  WORKER_POLL_INTERVAL: "500 millis",
  LEDGER_SWEEP_INTERVAL: "1 second",
  PREDICTION_SWEEP_INTERVAL: "1 second",
  METRICS_TOKEN: "metrics-token-for-tests"
}

beforeAll(async () => {
  shared = deployment(await createDatabase())
  db = testPool(shared.databaseUrl, 2)
  receiver = startReceiver()
  // One after the other: the first applies the migrations.
  a = await spawnServer({ deployment: shared, env })
  b = await spawnServer({ deployment: shared, env })
  // Two start-ups in a row, the first migrating: on a loaded machine more than the default 60 s.
}, { timeout: 150_000 })

afterAll(async () => {
  for (const server of [a, b]) server?.kill("SIGTERM")
  await Promise.all([a?.exited, b?.exited])
  await receiver.stop()
  await db.end()
  await dropDatabase(shared.databaseUrl)
})

/** One counter of a process's /metrics, summed over the label sets that match `labels`. */
const metric = async (server: ServerProcess, name: string, labels: string) => {
  const text = (await server.request<string>("/metrics", { key: env.METRICS_TOKEN })).body
  let total = 0
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name}{`) && line.includes(labels)) total += Number(line.slice(line.lastIndexOf(" ") + 1))
  }
  return total
}

const word = "quillmarsh"

test("two processes on one database: each job runs once, each delivery attempt is made once, the ledger balances", async () => {
  const clip = await smallClip()
  const admin = adminClient(a, shared.adminToken)

  // A catalog to search: 60 hooks with one word in common, in one category.
  expect(await importWordCatalog(b, shared.adminToken, word, 60)).toMatchObject({ inserted: 60, rejected_count: 0 })

  // Four accounts, each with a webhook, set through the other process.
  const accounts = await Promise.all(Array.from({ length: 4 }, () => admin.account({ monthly_balance: 1_000, topup_balance: 50 })))
  for (const account of accounts) {
    expect((await b.request("/v1/webhooks", { method: "PUT", key: account.key, body: { url: receiver.url } })).status).toBe(200)
  }
  // The first deliveries fail, so retries from both dispatchers are in play. Fewer failures than
  // one delivery's attempts: when one event is alone in the outbox (on a loaded machine the
  // abandoned link's event can be, for seconds), it takes them all and is still delivered.
  receiver.failNext(5, 500)

  // Work for both processes' sweepers at once: a monthly period that has just ended, and an
  // upload link that has just expired unused (both moved back in time in the database).
  const rolling = await admin.account({ monthly_balance: 300, monthly_grant: 1_000 })
  await db.query(
    `UPDATE wallets SET monthly_period_end = now() - interval '1 second', period_anchor = period_anchor - interval '1 month'
      WHERE account_id = $1`,
    [rolling.accountId]
  )
  const abandoned = (await a.request<UploadLink>("/v1/predict/upload", { method: "POST", key: accounts[0].key })).body.prediction_id
  await db.query("UPDATE uploads SET expires_at = now() - interval '1 second' WHERE prediction_id = $1", [abandoned])

  // Work through both processes at once: 3 clips per account, alternating processes, with
  // searches, lists and gets alongside.
  const servers = [a, b]
  const served = { a: 0, b: 0 }
  const charged = new Map<string, number>()
  const metered = async (server: ServerProcess, accountId: string, key: string, path: string) => {
    const response = await server.request(path, { key })
    expect(response.status).toBe(200)
    served[server === a ? "a" : "b"]++
    charged.set(accountId, (charged.get(accountId) ?? 0) + Number(response.headers.get("x-credits-charged")))
    return response
  }
  const predictionIds: Array<string> = []
  await Promise.all(accounts.flatMap((account, n) => [
    ...Array.from({ length: 3 }, async (_, i) => {
      const { predictionId } = await submitClip(servers[(n + i) % 2], account.key, clip)
      predictionIds.push(predictionId)
    }),
    ...Array.from({ length: 6 }, async (_, i) => {
      const server = servers[i % 2]
      const page = await metered(server, account.accountId, account.key, `/v1/hooks/search?q=${word}`)
      const hookId = (page.body as HookPage).data[i].id
      await metered(servers[(i + 1) % 2], account.accountId, account.key, `/v1/hooks/${hookId}`)
      await metered(server, account.accountId, account.key, "/v1/hooks/list?category=fitness")
    })
  ]))

  const jobs = predictionIds.length
  await eventually("every job finished", async () => {
    const { rows } = await db.query<{ n: string }>("SELECT count(*) AS n FROM predictions WHERE status IN ('succeeded', 'failed')")
    return Number(rows[0].n) === jobs + 1
  }, 90_000)
  await eventually("every event delivered", async () => {
    const { rows } = await db.query<{ delivered: string; failed: string }>(
      `SELECT count(*) FILTER (WHERE status = 'delivered') AS delivered, count(*) FILTER (WHERE status = 'failed') AS failed
         FROM webhook_deliveries`
    )
    // A delivery out of attempts will never arrive: fail now, saying so, rather than time out.
    expect(Number(rows[0].failed)).toBe(0)
    return Number(rows[0].delivered) === jobs + 1
  }, 30_000)

  // Each job ran once: succeeded on its first attempt, one event each, and the two processes'
  // workers together report exactly one run per job. The abandoned link failed once.
  const predictions = await db.query<{ id: string; status: string; attempts: number; error_type: string | null }>(
    "SELECT id, status, attempts, error_type FROM predictions"
  )
  const ran = predictions.rows.filter((p) => p.id !== abandoned)
  expect(ran.every((p) => p.status === "succeeded" && p.attempts === 1)).toBe(true)
  expect(predictions.rows.find((p) => p.id === abandoned)).toMatchObject({ status: "failed", attempts: 0, error_type: "upload_expired" })
  const events = await db.query<{ prediction_id: string; type: string; n: string }>(
    "SELECT payload->'data'->>'id' AS prediction_id, event_type AS type, count(*) AS n FROM webhook_deliveries GROUP BY 1, 2"
  )
  expect(events.rows.length).toBe(jobs + 1)
  expect(events.rows.every((e) => Number(e.n) === 1)).toBe(true)
  expect(events.rows.filter((e) => e.type === "prediction.failed").map((e) => e.prediction_id)).toEqual([abandoned])

  // Both processes' ledger sweepers saw the ended period: it rolled over exactly once.
  const rollovers = await db.query<{ entry_type: string; amount: string }>(
    "SELECT entry_type, amount FROM credit_journal WHERE account_id = $1 AND operation = 'rollover' ORDER BY seq",
    [rolling.accountId]
  )
  expect(rollovers.rows.map((r) => [r.entry_type, Number(r.amount)])).toEqual([["expire", -300], ["grant", 1_000]])
  // A worker counts its run only after it has finished the job and discarded the upload, so the
  // last count can trail the database: wait for the counters to reach the jobs, then check them.
  const runs = await eventually("every job run counted", async () => {
    const counted = await Promise.all(servers.map((server) => metric(server, "hookline_job_runs_total", "")))
    return counted[0] + counted[1] >= jobs && counted
  })
  expect(runs[0] + runs[1]).toBe(jobs)

  // Each delivery attempt was made once: the receiver saw each event exactly as many times as
  // attempts were recorded, with exactly one success, and the processes' counters agree.
  const deliveries = await db.query<{ event_id: string; attempts: number; recorded: string }>(
    `SELECT d.event_id, d.attempts, (SELECT count(*) FROM webhook_attempts w WHERE w.delivery_id = d.id) AS recorded
       FROM webhook_deliveries d`
  )
  let retried = 0
  for (const delivery of deliveries.rows) {
    const seen = receiver.requests.filter((r) => r.headers["webhook-id"] === delivery.event_id)
    expect(seen.length).toBe(delivery.attempts)
    expect(Number(delivery.recorded)).toBe(delivery.attempts)
    expect(seen.filter((r) => r.answered === 200).length).toBe(1)
    if (delivery.attempts > 1) retried++
  }
  const attempts = deliveries.rows.reduce((sum, d) => sum + d.attempts, 0)
  const attemptsByProcess = await Promise.all(servers.map((server) => metric(server, "hookline_webhook_attempts_total", "")))
  expect(attemptsByProcess[0] + attemptsByProcess[1]).toBe(attempts)
  expect(retried).toBeGreaterThanOrEqual(1)

  // The ledger balances for every account, nothing is left pending, and what each wallet lost is
  // exactly the X-Credits-Charged answered plus 20 per succeeded job.
  for (const account of [...accounts, rolling]) {
    const state = await ledgerState(db, account.accountId)
    expect(state.monthly).toBe(state.journalMonthly)
    expect(state.topup).toBe(state.journalTopup)
    expect(state.pendingHolds).toBe(0)
  }
  for (const account of accounts) {
    const state = await ledgerState(db, account.accountId)
    expect(state.monthly).toBe(state.journalMonthly)
    expect(state.topup).toBe(state.journalTopup)
    expect(state.pendingHolds).toBe(0)
    const jobsOfAccount = 3
    expect(1_050 - (state.monthly + state.topup)).toBe((charged.get(account.accountId) ?? 0) + 20 * jobsOfAccount)
  }
  const totalCharged = [...charged.values()].reduce((sum, n) => sum + n, 0) + 20 * jobs

  console.log(
    `two processes: ${jobs} jobs (runs: A ${runs[0]}, B ${runs[1]}; all on attempt 1), ` +
      `${deliveries.rows.length} deliveries with ${attempts} attempts (A ${attemptsByProcess[0]}, B ${attemptsByProcess[1]}; ${retried} retried), ` +
      `${served.a + served.b} metered requests (A ${served.a}, B ${served.b}), ${totalCharged} credits charged over ${accounts.length} accounts, ` +
      `one rollover and one link expiry raced by both sweepers and applied once, 0 pending holds, balance == sum(journal) everywhere`
  )
}, 150_000)
