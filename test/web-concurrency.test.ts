/**
 * WEB_CONCURRENCY=2: `bun src/main.ts` supervises two server processes on one port
 * (SO_REUSEPORT), on one PostgreSQL and one Redis. Under a concurrent load of metered calls over
 * fresh connections (so the kernel spreads them over both): every charge answered is in the
 * journal and each wallet equals its journal; a key's rate limit is counted once for both
 * processes; a child killed with SIGKILL is replaced (a new pid, its metrics port back, the API
 * port answering all along) and loses no credit; SIGTERM to the supervisor lets both children
 * finish what they hold and exits 0; a supervisor killed with SIGKILL leaves no child serving.
 * N > 1 refuses the embedded database, a missing REDIS_URL and a taken port, each in one line.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import { readFileSync } from "node:fs"
import Pg from "pg"
import {
  adminClient,
  baseEnvironment,
  childPids,
  type Deployment,
  deployment,
  freeConsecutivePorts,
  freePort,
  importWordCatalog,
  type ServerProcess,
  spawnServer
} from "./support/process.js"
import { eventually } from "./support/receiver.js"
import { createDatabase, dropDatabase, ledgerState, testPool } from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

let shared: Deployment
let db: Pg.Pool
let server: ServerProcess
let metricsPort: number

const word = "quillmarsh"

beforeAll(async () => {
  shared = deployment(await createDatabase())
  db = testPool(shared.databaseUrl, 4)
  metricsPort = freeConsecutivePorts(2)
  server = await spawnServer({
    deployment: shared,
    env: {
      WEB_CONCURRENCY: "2",
      REDIS_URL: process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
      RATE_LIMIT_ENABLED: "true",
      // The load's accounts (enterprise) are not limited; the limit test's key (pro) gets 10, refilled ~never.
      RATE_LIMIT_ENTERPRISE: "10000/20000",
      RATE_LIMIT_PRO: "0.001/10",
      // Not a test of the fallback: a loaded machine must not make a process count alone.
      RATE_LIMIT_STORE_TIMEOUT: "10 seconds",
      METRICS_PORT: String(metricsPort),
      WEB_RESTART_DELAY: "200 millis",
      WEB_RESTART_MAX_DELAY: "1 minute",
      HOLD_TIMEOUT: "2 seconds",
      LEDGER_SWEEP_INTERVAL: "500 millis",
      SEARCH_TIMEOUT: "60 seconds",
      LOG_LEVEL: "info"
    }
  })
  await eventually("both children serve their metrics", async () => (await Promise.all([0, 1].map(childMetrics))).every((text) => text !== null), 60_000)
  const imported = await importWordCatalog(server, shared.adminToken, word, 30)
  if ((imported as { inserted?: number }).inserted !== 30) throw new Error(`import: ${JSON.stringify(imported)}`)
}, { timeout: 150_000 })

afterAll(async () => {
  if (server !== undefined && server.child.exitCode === null) {
    for (const pid of childPids(server.pid)) process.kill(pid, "SIGKILL")
    server.kill("SIGKILL")
  }
  await server?.exited
  await db.end()
  await dropDatabase(shared.databaseUrl)
})

/** Child `index`'s /metrics on its own port (METRICS_PORT + index), or null while it does not answer. */
const childMetrics = (index: number) =>
  fetch(`http://127.0.0.1:${metricsPort + index}/metrics`).then((r) => (r.status === 200 ? r.text() : null), () => null)

const counter = (text: string, name: string) =>
  text.split("\n").filter((line) => line.startsWith(name)).reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0)

/** A request on a connection of its own, so the kernel picks the child. */
const fresh = (path: string, key: string) => server.request(path, { key, keepAlive: false })

/** The admin API, each call on a connection of its own too (a pooled one may lead to a child since killed). */
const admin = () =>
  adminClient({ request: (path, options) => server.request(path, { ...options, keepAlive: false }) }, shared.adminToken)

const paths = [`/v1/hooks/search?q=${word}`, "/v1/hooks/list?category=fitness"]

test("two processes on one port: concurrent metered calls are each charged once, every wallet equals its journal", async () => {
  const accounts = await Promise.all(Array.from({ length: 4 }, () => admin().account({ plan: "enterprise", monthly_balance: 5_000 })))
  const charged = new Map<string, number>()
  await Promise.all(accounts.flatMap((account) =>
    Array.from({ length: 20 }, async (_, i) => {
      const response = await fresh(paths[i % paths.length], account.key)
      expect(response.status).toBe(200)
      charged.set(account.accountId, (charged.get(account.accountId) ?? 0) + Number(response.headers.get("x-credits-charged")))
    })
  ))
  const total = [...charged.values()].reduce((sum, n) => sum + n, 0)
  expect(total).toBeGreaterThan(0)
  for (const account of accounts) {
    const state = await ledgerState(db, account.accountId)
    expect(state.pendingHolds).toBe(0)
    expect(state.monthly + state.topup).toBe(state.journalMonthly + state.journalTopup)
    expect(5_000 - state.monthly).toBe(charged.get(account.accountId)!)
  }
  // Both children served part of the load, and together they counted exactly what was answered.
  const perChild = (await Promise.all([0, 1].map(childMetrics))).map((text) => counter(text ?? "", "hookline_credits_charged_total"))
  expect(perChild.every((n) => n > 0)).toBe(true)
  expect(perChild[0] + perChild[1]).toBe(total)
}, 120_000)

test("a key's rate limit is shared by both processes: 10 answered in all, the rest 429 with nothing charged", async () => {
  const account = await admin().account({ plan: "pro", monthly_balance: 1_000 })
  const answers = await Promise.all(Array.from({ length: 30 }, () => fresh("/v1/hooks/list?category=fitness", account.key)))
  const served = answers.filter((a) => a.status === 200)
  const refused = answers.filter((a) => a.status === 429)
  expect(served.length).toBe(10)
  expect(refused.length).toBe(20)
  for (const answer of refused) {
    expect(answer.body).toMatchObject({ error: { type: "rate_limit_exceeded" } })
    expect(answer.headers.get("retry-after")).not.toBeNull()
  }
  const state = await ledgerState(db, account.accountId)
  const charged = served.reduce((sum, a) => sum + Number(a.headers.get("x-credits-charged")), 0)
  expect(1_000 - state.monthly).toBe(charged)
  expect(state.monthly).toBe(state.journalMonthly)
}, 60_000)

test("a child killed under load is replaced, with a growing wait when it keeps dying; the port keeps answering and no credit is lost", async () => {
  const account = await admin().account({ plan: "enterprise", monthly_balance: 5_000 })
  const before = childPids(server.pid)
  expect(before.length).toBe(2)
  const [victim] = before
  // Load running while the child dies: answers from either child, or cut off on the dead one.
  const load = Promise.all(Array.from({ length: 40 }, (_, i) =>
    fresh(paths[i % paths.length], account.key).then((r) => r, () => "cut off" as const)))
  process.kill(victim, "SIGKILL")
  await eventually("the dead child is reaped", async () => !childPids(server.pid).includes(victim))
  // While one child is dead or starting, the port answers: the other child (200) or the starting one (503, retry).
  const during = await Promise.all(Array.from({ length: 10 }, () => fresh("/healthz", account.key)))
  for (const answer of during) expect([200, 503]).toContain(answer.status)

  const replacement = await eventually("a replacement child", async () => {
    const now = childPids(server.pid)
    return now.length === 2 && !now.includes(victim) && now
  }, 60_000)
  expect(replacement).toContain(before[1])
  await eventually("the replacement serves its metrics", async () => (await childMetrics(0)) !== null, 60_000)
  expect(server.output()).toContain("restart_in=200ms")
  // It dies again at once: the next replacement waits twice as long.
  const second = replacement.find((pid) => pid !== before[1])!
  process.kill(second, "SIGKILL")
  await eventually("the second replacement serves", async () => {
    const now = childPids(server.pid)
    return now.length === 2 && !now.includes(second) && (await childMetrics(0)) !== null
  }, 60_000)
  expect(server.output()).toContain("restart_in=400ms")

  const answers = await load
  const cutOff = answers.filter((a) => a === "cut off").length
  const served = answers.filter((a) => a !== "cut off")
  for (const answer of served) expect([200, 503]).toContain(answer.status)
  // Ten fresh connections in a row all served: both children are back.
  await eventually("every connection served again", async () =>
    (await Promise.all(Array.from({ length: 10 }, () => fresh("/readyz", account.key)))).every((a) => a.status === 200), 60_000)
  // Holds the dead child left are voided (HOLD_TIMEOUT); the wallet equals its journal, and lost
  // at least what was answered as charged (a charge settled just before the kill has no answer).
  await eventually("no hold left pending", async () => (await ledgerState(db, account.accountId)).pendingHolds === 0)
  const state = await ledgerState(db, account.accountId)
  expect(state.monthly).toBe(state.journalMonthly)
  const answered = served.reduce((sum, a) => sum + Number(a.headers.get("x-credits-charged") ?? 0), 0)
  expect(5_000 - state.monthly).toBeGreaterThanOrEqual(answered)
  console.log(`kill under load: ${served.length} answered, ${cutOff} cut off, ${5_000 - state.monthly} credits debited, ${answered} answered as charged`)
}, 120_000)

test("SIGTERM to the supervisor: both children finish the requests they hold, then it exits 0", async () => {
  const account = await admin().account({ plan: "enterprise", monthly_balance: 1_000 })
  const children = childPids(server.pid)
  // Searches held in flight (words not searched before, so none is answered from the cache):
  // each commits its hold, then waits for the locked catalog.
  const locker = await db.connect()
  let held: Array<ReturnType<typeof fresh>> = []
  try {
    await locker.query("BEGIN")
    await locker.query("LOCK TABLE hooks, hook_search, hook_search_postings IN ACCESS EXCLUSIVE MODE")
    held = Array.from({ length: 8 }, (_, i) => fresh(`/v1/hooks/search?q=${word}%20number%20${i}`, account.key))
    const pending = async () =>
      Number((await db.query<{ n: string }>("SELECT count(*) AS n FROM holds WHERE account_id = $1 AND status = 'pending'", [account.accountId])).rows[0].n)
    await eventually("every search holds its credits", async () => (await pending()) === 8, 60_000)
    const stoppingBefore = server.output().split("shutting down: refusing new requests").length
    server.kill("SIGTERM")
    await eventually("both children are draining", async () => server.output().split("shutting down: refusing new requests").length - stoppingBefore === 2)
  } finally {
    await locker.query("ROLLBACK")
    locker.release()
  }

  const answers = await Promise.all(held)
  expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200))
  expect(await server.exited).toBe(0)
  for (const pid of children) expect(childPids(server.pid)).not.toContain(pid)
  for (const pid of children) expect(() => process.kill(pid, 0)).toThrow()
  // The children's two lines and the supervisor's.
  expect(server.output().split("Hookline stopped").length - 1).toBe(3)
  const state = await ledgerState(db, account.accountId)
  expect(state.pendingHolds).toBe(0)
  expect(1_000 - state.monthly).toBe(answers.reduce((sum, a) => sum + Number(a.headers.get("x-credits-charged")), 0))
}, 120_000)

/** The process is gone, or a zombie nobody has reaped yet (an orphan's reaper may be slow). */
const gone = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.startsWith("Z") ?? true
  } catch {
    return true
  }
}

test("a child whose supervisor is killed (SIGKILL) stops itself: nothing is left serving the port", async () => {
  const supervisor = await spawnServer({
    deployment: shared,
    env: { WEB_CONCURRENCY: "2", REDIS_URL: process.env.REDIS_URL ?? "redis://127.0.0.1:6379", LOG_LEVEL: "info" }
  })
  const children = await eventually("two children", () => {
    const pids = childPids(supervisor.pid)
    return pids.length === 2 && pids
  }, 60_000)
  try {
    await eventually("both children listening", () => supervisor.output().split("Listening on").length - 1 === 2, 60_000)
    supervisor.kill("SIGKILL")
    expect(await supervisor.exited).toBe(137)
    await eventually("both children stopped", () => children.every(gone), 60_000)
    expect(await fetch(`${supervisor.url}/healthz`).then((r) => r.status, () => "refused")).toBe("refused")
    // Each drained as on SIGTERM (its supervisor's channel closed), rather than dying mid-request.
    expect(supervisor.output().split("Hookline stopped").length - 1).toBe(2)
  } finally {
    for (const pid of children) if (!gone(pid)) process.kill(pid, "SIGKILL")
  }
}, 120_000)

/** `bun src/main.ts` with `env`, to its exit: its code and everything it printed. */
const runToExit = async (env: Record<string, string>) => {
  const child = Bun.spawn([process.execPath, "src/main.ts"], { cwd: `${import.meta.dir}/..`, env, stdout: "pipe", stderr: "pipe" })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { code, output: stdout + stderr }
}

test("WEB_CONCURRENCY=2 with the embedded database refuses to start, saying to set DATABASE_URL", async () => {
  const { code, output } = await runToExit({
    ...baseEnvironment(),
    WEB_CONCURRENCY: "2",
    REDIS_URL: "redis://127.0.0.1:6379",
    DATA_DIR: tempDir("hookline-wc-"),
    PORT: String(freePort())
  })
  expect(code).toBe(1)
  expect(output.split("the embedded database (no DATABASE_URL) belongs to one process: set DATABASE_URL to a PostgreSQL server they share, or WEB_CONCURRENCY=1").length - 1).toBe(1)
  expect(output).not.toContain("Listening on")
}, 60_000)

test("WEB_CONCURRENCY=2 without REDIS_URL refuses to start, saying rate limits would multiply", async () => {
  const { code, output } = await runToExit({
    ...baseEnvironment(),
    WEB_CONCURRENCY: "2",
    DATABASE_URL: shared.databaseUrl,
    DATA_DIR: shared.dataDir,
    PORT: String(freePort())
  })
  expect(code).toBe(1)
  expect(output.split("without REDIS_URL each counts rate limits alone (a key would get 2 times its limit): set REDIS_URL to a Redis they share, or WEB_CONCURRENCY=1").length - 1).toBe(1)
  expect(output).not.toContain("Listening on")
}, 60_000)

test("WEB_CONCURRENCY=2 on a port another program holds refuses to start, naming PORT, once", async () => {
  const holder = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() })
  try {
    const { code, output } = await runToExit({
      ...baseEnvironment(),
      WEB_CONCURRENCY: "2",
      DATABASE_URL: shared.databaseUrl,
      REDIS_URL: process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
      DATA_DIR: shared.dataDir,
      HOST: "127.0.0.1",
      PORT: String(holder.port)
    })
    expect(code).toBe(1)
    expect(output.split(`Port ${holder.port} is in use`).length - 1).toBe(1)
    expect(output).toContain("choose another port with PORT")
    expect(output).not.toContain("server process started")
  } finally {
    holder.stop(true)
  }
}, 60_000)
