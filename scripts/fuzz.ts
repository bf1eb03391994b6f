/**
 * The long fuzz run: `npm run fuzz -- --requests 100000 [--concurrency 8] [--seed N] [--embedded]`.
 * Starts a server on a fresh test database (as the tests do), or with --embedded `bun src/main.ts`
 * on a fresh embedded data directory (the default a new user runs), sends hostile requests to every
 * route (test/support/fuzz.ts, the generators the fuzz test uses), then checks the ledger:
 * the wallet moved by exactly the sum of X-Credits-Charged answered, no hold is left pending,
 * and balance == sum(journal). Prints the status histogram; exits 1 on any problem.
 */
import { randomInt } from "node:crypto"
import { parseArgs } from "node:util"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { embeddedLedger } from "../test/support/embeddedLedger.js"
import { routes, runFuzz, seedCatalog } from "../test/support/fuzz.js"
import { adminClient, spawnEmbeddedServer } from "../test/support/process.js"
import { ledgerState, startTestServer } from "../test/support/server.js"

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "100000" },
    concurrency: { type: "string", default: "8" },
    seed: { type: "string", default: String(randomInt(1_000_000)) },
    embedded: { type: "boolean", default: false }
  }
})
const requests = Number(values.requests)
const concurrency = Number(values.concurrency)
const seed = Number(values.seed)

interface LedgerState {
  readonly monthly: number
  readonly topup: number
  readonly journalMonthly: number
  readonly journalTopup: number
  readonly pendingHolds: number
}

/** Where the fuzz runs: a server on a fresh test database, or `bun src/main.ts` on a fresh embedded data directory. */
interface Target {
  readonly url: string
  readonly adminToken: string
  readonly account: () => Promise<{ readonly accountId: string; readonly key: string }>
  /** The account's ledger, holds of requests still in flight given 10 s to settle. */
  readonly ledger: (accountId: string) => Promise<LedgerState>
  /** Whether the server still answers (checked before it stops). */
  readonly stillAnswering: () => Promise<boolean>
  readonly close: () => Promise<void>
}

const accountFields = { plan: "enterprise", monthly_balance: 1_000_000, topup_balance: 1_000 }

const settled = async (read: () => Promise<LedgerState>) => {
  const deadline = Date.now() + 10_000
  let state = await read()
  while (state.pendingHolds > 0 && Date.now() < deadline) {
    await Bun.sleep(50)
    state = await read()
  }
  return state
}

const databaseTarget = async (): Promise<Target> => {
  // LOG_LEVEL=error shows what answered a 5xx (the server runs in this process).
  const server = await startTestServer({ LOG_LEVEL: process.env.LOG_LEVEL ?? "None" })
  return {
    url: server.url,
    adminToken: server.adminToken,
    account: () => server.account(accountFields),
    ledger: (accountId) => settled(() => ledgerState(server.db, accountId)),
    stillAnswering: () => fetch(`${server.url}/readyz`).then((r) => r.ok, () => false),
    close: () => server.close()
  }
}

/** The embedded default as `npm start` runs it; its ledger is read from the data directory once it has stopped. */
const embeddedTarget = async (): Promise<Target> => {
  const dataDir = mkdtempSync(join(tmpdir(), "hookline-fuzz-embedded-"))
  const server = await spawnEmbeddedServer({ dataDir, demoCatalogSize: 0, env: { RATE_LIMIT_ENABLED: "false", LOG_LEVEL: process.env.LOG_LEVEL ?? "Error" } })
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    server.kill("SIGTERM")
    await server.exited
  }
  return {
    url: server.url,
    adminToken: server.adminToken,
    account: () => adminClient(server, server.adminToken).account(accountFields),
    ledger: async (accountId) => {
      // Let holds of requests still in flight settle, then read the directory with the server gone.
      await Bun.sleep(1_000)
      await stop()
      const wallet = (await embeddedLedger(dataDir)).get(accountId)
      if (wallet === undefined) throw new Error(`no wallet for ${accountId}`)
      return wallet
    },
    stillAnswering: () => fetch(`${server.url}/readyz`).then((r) => r.ok, () => false),
    close: async () => {
      await stop()
      if (process.exitCode === undefined || process.exitCode === 0) rmSync(dataDir, { recursive: true, force: true })
      else console.log(`server output:\n${server.output()}`)
    }
  }
}

const target = values.embedded ? await embeddedTarget() : await databaseTarget()
let failed = false
try {
  const account = await target.account()
  await seedCatalog({ url: target.url, adminToken: target.adminToken, key: account.key })
  const walletBefore = await fetch(`${target.url}/v1/wallet`, { headers: { authorization: `Bearer ${account.key}` } })
  const before = (await walletBefore.json()) as { monthly_balance: number; topup_balance: number }
  const started = Date.now()
  console.log(`fuzz${values.embedded ? " (embedded database)" : ""}: ${requests} requests over ${routes.length} routes, ${concurrency} at a time, seed ${seed}`)
  const report = await runFuzz({ url: target.url, adminToken: target.adminToken, key: account.key }, {
    requests,
    concurrency,
    seed,
    onProgress: (sent) => {
      if (sent % 10_000 === 0) console.log(`  ${sent} sent (${Math.round((Date.now() - started) / 1000)} s)`)
    }
  })
  const answering = await target.stillAnswering()
  const after = await target.ledger(account.accountId)
  const moved = before.monthly_balance + before.topup_balance - (after.monthly + after.topup)
  const statuses = [...report.statuses].sort(([a], [b]) => a.localeCompare(b))
  const serverErrors = statuses.filter(([status]) => status.startsWith("5")).reduce((sum, [, n]) => sum + n, 0)
  console.log(`sent ${report.sent} in ${Math.round((Date.now() - started) / 1000)} s`)
  console.log(`statuses: ${statuses.map(([status, n]) => `${status}: ${n}`).join(", ")}`)
  console.log(`ledger: charged (sum of X-Credits-Charged) ${report.charged}, wallet moved ${moved}; ` +
    `balance == sum(journal): ${after.monthly === after.journalMonthly && after.topup === after.journalTopup}; pending holds: ${after.pendingHolds}`)
  console.log(`still answering after the run: ${answering}; 5xx answers: ${serverErrors}`)
  const ledgerOk = moved === report.charged && after.monthly === after.journalMonthly && after.topup === after.journalTopup &&
    after.pendingHolds === 0
  if (!ledgerOk) console.log("LEDGER MISMATCH")
  console.log(`problems: ${report.problems.length}`)
  for (const problem of report.problems.slice(0, 20)) console.log(`  ${problem}`)
  failed = !ledgerOk || report.problems.length > 0 || !answering || serverErrors > 0
  if (failed) process.exitCode = 1
} finally {
  await target.close()
}
process.exit(failed ? 1 : 0)
