/**
 * Crash safety: a `bun src/main.ts` process is killed with SIGKILL while metered requests hold
 * credits, prediction jobs run, more wait in the queue and webhook deliveries are mid-attempt.
 * A new process on the same database recovers everything: its sweepers void the orphaned holds
 * and re-queue the jobs whose worker stopped heart-beating, its dispatcher takes over the
 * deliveries once their lease runs out, and every account's balance equals its journal.
 *
 * The same with two server processes on one port (WEB_CONCURRENCY=2), all killed at once.
 *
 * The metered requests are held in flight deterministically: the test locks the catalog's
 * tables, so each request has reserved its credits and then waits for its query.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import Pg from "pg"
import {
  adminClient,
  type Deployment,
  deployment,
  gatedProbe,
  type GatedProbe,
  type ServerProcess,
  smallClip,
  spawnServer,
  submitClip
} from "./support/process.js"
import { eventually, type Receiver, startReceiver } from "./support/receiver.js"
import { createDatabase, dropDatabase, ledgerState, testPool } from "./support/server.js"

let receiver: Receiver
let probe: GatedProbe
const started: Array<ServerProcess> = []
const databases: Array<{ readonly url: string; readonly pool: Pg.Pool }> = []
let locker: Pg.PoolClient | null = null

/** Ends the test's table lock, when one is held. */
const releaseLock = async () => {
  if (locker === null) return
  await locker.query("ROLLBACK")
  locker.release()
  locker = null
}

const common = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  WEBHOOK_ALLOW_INSECURE: "true",
  WEBHOOK_RETRY_SCHEDULE: "200ms,200ms,200ms",
  WEBHOOK_POLL_INTERVAL: "200ms",
  WORKER_CONCURRENCY: "2",
  WORKER_POLL_INTERVAL: "300 millis",
  HEARTBEAT_INTERVAL: "300 millis"
}

beforeAll(() => {
  receiver = startReceiver()
  probe = gatedProbe()
})

afterAll(async () => {
  probe.open()
  await releaseLock()
  for (const server of started) if (server.child.exitCode === null) server.kill("SIGKILL")
  await Promise.all(started.map((server) => server.exited))
  await receiver.stop()
  for (const { url, pool } of databases) {
    await pool.end()
    await dropDatabase(url)
  }
})

const word = "quillmarsh"

/** Every process of a server: a supervisor's children first (WEB_CONCURRENCY above 1), then itself. */
const killHard = (server: ServerProcess) => {
  const children = Bun.spawnSync(["pgrep", "-P", String(server.pid)]).stdout.toString().split("\n").filter((pid) => pid !== "")
  for (const pid of children) process.kill(Number(pid), "SIGKILL")
  server.kill("SIGKILL")
}

/**
 * The crash, with `processes` server processes on one port (WEB_CONCURRENCY): each has one job
 * worker, so two jobs run at once whatever the count, and every process is killed at once.
 */
const crashScenario = (processes: number) => async () => {
  const shared: Deployment = deployment(await createDatabase())
  const db = testPool(shared.databaseUrl, 4)
  databases.push({ url: shared.databaseUrl, pool: db })
  const count = async (query: string, params: ReadonlyArray<unknown> = []) =>
    Number((await db.query<{ n: string }>(query, [...params])).rows[0].n)
  receiver.clear()
  const perProcess = {
    WEB_CONCURRENCY: String(processes),
    WORKER_CONCURRENCY: String(2 / processes),
    // Statements of several requests share pipelined connections: a hook get's lookup waiting for
    // the test's table lock holds back the reserves queued behind it on its connection, and not
    // every request reaches its hold before the crash (with one process as with two, depending on
    // which connection each statement lands on). A connection per statement keeps the setup.
    DB_PIPELINE: "false"
  }
  const clip = await smallClip()
  const first = await spawnServer({
    deployment: shared,
    env: {
      ...common,
      ...perProcess,
      // The scorer's ffprobe waits at the gate: jobs stay running until the test opens it.
      FFPROBE_PATH: probe.path,
      // Every request in flight keeps a connection while it waits for the locked catalog (the
      // connections of every process count against PostgreSQL's max_connections).
      PG_MAX_CONNECTIONS: String(processes === 1 ? 40 : 24),
      // Holds expire 5 s after their reserve; this process never sweeps (the next one will).
      HOLD_TIMEOUT: "5 seconds",
      LEDGER_SWEEP_INTERVAL: "1 hour",
      // Delivery attempts wait for the hanging receiver until the crash; the next process retries
      // them once their lease (the timeout plus a second) has run out.
      WEBHOOK_TIMEOUT: "10s",
      WEBHOOK_CLAIM_LEASE: "1s"
    }
  })
  started.push(first)
  const admin = adminClient(first, shared.adminToken)

  await first.request("/admin/catalog/categories", { method: "PUT", key: shared.adminToken, body: [{ slug: "fitness", name: "Fitness" }] })
  const imported = await first.request("/admin/catalog/hooks", {
    method: "POST",
    key: shared.adminToken,
    rawBody: Array.from({ length: 30 }, (_, i) =>
      JSON.stringify({ text: `${word} hook ${i}`, platform: "tiktok", source_url: `https://tiktok.example/${i}`, category: "fitness" }))
      .join("\n"),
    headers: { "content-type": "application/x-ndjson" }
  })
  expect(imported.body).toMatchObject({ inserted: 30, rejected_count: 0 })
  const hookId = (await db.query<{ id: string }>("SELECT id FROM hooks LIMIT 1")).rows[0].id

  const accounts = await Promise.all(Array.from({ length: 3 }, () => admin.account({ monthly_balance: 200, topup_balance: 40 })))
  const getter = await admin.account({ monthly_balance: 200, topup_balance: 40 })
  for (const account of accounts) {
    expect((await first.request("/v1/webhooks", { method: "PUT", key: account.key, body: { url: receiver.url } })).status).toBe(200)
  }

  // Two jobs finish before the crash; their deliveries hang at the receiver when it comes.
  receiver.hang(true)
  probe.open()
  const early = await Promise.all([submitClip(first, accounts[0].key, clip), submitClip(first, accounts[1].key, clip)])
  await eventually("the early jobs succeeded", async () =>
    (await count("SELECT count(*) AS n FROM predictions WHERE status = 'succeeded'")) === early.length)
  await eventually("their deliveries are mid-attempt", () => receiver.requests.length === early.length)

  // Four more jobs: two running (held by the gated ffprobe), two queued behind them.
  probe.close()
  const late = await Promise.all(accounts.concat(accounts[0]).map((account) => submitClip(first, account.key, clip)))
  await eventually("two jobs running", async () => (await count("SELECT count(*) AS n FROM predictions WHERE status = 'running'")) === 2)

  // Metered requests held in flight. A search or list commits its hold, then waits for the locked
  // catalog. A hook get reserves, reads and settles in one transaction: the first waits for the
  // catalog, the others of its account for the wallet row it locked; a crash leaves nothing of them.
  // A scenario that failed while holding the lock left it to the next (its database would not drop).
  await releaseLock()
  locker = await db.connect()
  await locker.query("BEGIN")
  await locker.query("LOCK TABLE hooks, hook_search, hook_search_postings IN ACCESS EXCLUSIVE MODE")
  const paths = [`/v1/hooks/search?q=${word}`, "/v1/hooks/list?category=fitness"]
  const send = (key: string, path: string) => first.request(path, { key }).then((r) => r.status, () => "cut off" as const)
  const fired = [
    ...accounts.flatMap((account) => Array.from({ length: 10 }, (_, i) => send(account.key, paths[i % paths.length]))),
    ...Array.from({ length: 5 }, () => send(getter.key, `/v1/hooks/${hookId}`))
  ]
  const meteredHolds = "SELECT count(*) AS n FROM holds WHERE status = 'pending' AND operation <> 'prediction'"
  await eventually("every request holds its credits", async () => (await count(meteredHolds)) === 30)

  killHard(first)
  expect(await first.exited).toBe(137)
  const answers = await Promise.all(fired)
  await releaseLock()

  const atCrash = {
    inFlight: answers.filter((a) => a === "cut off").length,
    meteredHolds: await count(meteredHolds),
    predictionHolds: await count("SELECT count(*) AS n FROM holds WHERE status = 'pending' AND operation = 'prediction'"),
    running: await count("SELECT count(*) AS n FROM predictions WHERE status = 'running'"),
    queued: await count("SELECT count(*) AS n FROM predictions WHERE status = 'queued'"),
    deliveriesCut: receiver.requests.filter((r) => r.answered === null).length
  }
  expect(atCrash).toEqual({ inFlight: 35, meteredHolds: 30, predictionHolds: 4, running: 2, queued: 2, deliveriesCut: 2 })
  for (const account of [...accounts, getter]) {
    const state = await ledgerState(db, account.accountId)
    expect([state.monthly, state.topup]).toEqual([state.journalMonthly, state.journalTopup])
  }

  // The next process, with short sweep timeouts.
  receiver.hang(false)
  probe.open()
  const next = await spawnServer({
    deployment: shared,
    env: { ...common, ...perProcess, LEDGER_SWEEP_INTERVAL: "300 millis", HEARTBEAT_TIMEOUT: "2 seconds", PREDICTION_SWEEP_INTERVAL: "300 millis" }
  })
  started.push(next)
  await eventually("no hold pending", async () => (await count("SELECT count(*) AS n FROM holds WHERE status = 'pending'")) === 0, 30_000)
  await eventually("every job finished", async () =>
    (await count("SELECT count(*) AS n FROM predictions WHERE status NOT IN ('succeeded', 'failed')")) === 0, 30_000)
  await eventually("every event delivered", async () =>
    (await count("SELECT count(*) AS n FROM webhook_deliveries WHERE status <> 'delivered'")) === 0, 30_000)

  // Holds: the orphaned metered ones voided (nothing taken), the prediction ones settled.
  const holds = await db.query<{ operation: string; status: string; n: string }>(
    "SELECT operation, status, count(*) AS n FROM holds GROUP BY 1, 2 ORDER BY 1, 2"
  )
  const byKind = Object.fromEntries(holds.rows.map((r) => [`${r.operation}:${r.status}`, Number(r.n)]))
  expect(byKind).toEqual({ "list:voided": 15, "prediction:settled": 6, "search:voided": 15 })

  // Jobs: all succeeded; the two that were running came back for a second attempt.
  const jobs = await db.query<{ id: string; status: string; attempts: number }>("SELECT id, status, attempts FROM predictions")
  expect(jobs.rows.every((j) => j.status === "succeeded")).toBe(true)
  expect(jobs.rows.filter((j) => j.attempts === 2).length).toBe(2)
  expect(jobs.rows.filter((j) => j.attempts === 1).length).toBe(4)
  expect(jobs.rows.map((j) => j.id).sort()).toEqual([...early, ...late].map((j) => j.predictionId).sort())

  // Deliveries: each event reached the receiver with one success, once per counted attempt; an
  // attempt cut off by the crash counts (it was made) but has no outcome row.
  const deliveries = await db.query<{ event_id: string; attempts: number; recorded: string }>(
    `SELECT d.event_id, d.attempts, (SELECT count(*) FROM webhook_attempts w WHERE w.delivery_id = d.id) AS recorded
       FROM webhook_deliveries d`
  )
  expect(deliveries.rows.length).toBe(6)
  for (const delivery of deliveries.rows) {
    const seen = receiver.requests.filter((r) => r.headers["webhook-id"] === delivery.event_id)
    expect(seen.filter((r) => r.answered === 200).length).toBe(1)
    expect(seen.length).toBe(delivery.attempts)
    expect(delivery.attempts - Number(delivery.recorded)).toBe(seen.filter((r) => r.answered === null).length)
  }
  expect(deliveries.rows.filter((d) => d.attempts === 2).length).toBe(atCrash.deliveriesCut)

  // Money: each wallet lost exactly 20 per succeeded job and nothing for the requests cut off.
  const jobsPerAccount = [3, 2, 1]
  for (const [n, account] of accounts.entries()) {
    const state = await ledgerState(db, account.accountId)
    expect([state.monthly, state.topup]).toEqual([state.journalMonthly, state.journalTopup])
    expect(state.pendingHolds).toBe(0)
    expect(240 - (state.monthly + state.topup)).toBe(20 * jobsPerAccount[n])
  }
  // The hook gets cut off left no trace: no hold, only the opening grants in the journal.
  expect(await ledgerState(db, getter.accountId)).toEqual({
    monthly: 200,
    topup: 40,
    journalMonthly: 200,
    journalTopup: 40,
    pendingHolds: 0
  })
  expect(await count("SELECT count(*) AS n FROM holds WHERE account_id = $1", [getter.accountId])).toBe(0)

  next.kill("SIGTERM")
  expect(await next.exited).toBe(0)
  console.log(
    `crash with ${processes} process(es): ${atCrash.inFlight} metered requests in flight at SIGKILL; ${atCrash.meteredHolds} orphaned holds voided after the restart ` +
      `(the other ${atCrash.inFlight - atCrash.meteredHolds} requests rolled back with their transaction); ` +
      `${atCrash.predictionHolds} prediction holds settled by their jobs; ${atCrash.running} running jobs re-queued and finished on attempt 2, ` +
      `${atCrash.queued} queued jobs finished; ${atCrash.deliveriesCut} deliveries cut mid-attempt and re-delivered; ` +
      `balance == sum(journal) for all ${accounts.length + 1} accounts`
  )
}

test("SIGKILL mid-flight: after a restart every hold is resolved, no job is stuck, every ledger balances", crashScenario(1), 120_000)

test("the same crash with WEB_CONCURRENCY=2: both processes killed at once, the next two recover everything", crashScenario(2), 120_000)
