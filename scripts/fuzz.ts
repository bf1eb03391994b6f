/**
 * The long fuzz run: `npm run fuzz -- --requests 100000 [--concurrency 8] [--seed N]`.
 * Starts a server on a fresh test database (as the tests do), sends hostile requests to every
 * route (test/support/fuzz.ts, the generators the fuzz test uses), then checks the ledger:
 * the wallet moved by exactly the sum of X-Credits-Charged answered, no hold is left pending,
 * and balance == sum(journal). Prints the status histogram; exits 1 on any problem.
 */
import { randomInt } from "node:crypto"
import { parseArgs } from "node:util"
import { routes, runFuzz, seedCatalog } from "../test/support/fuzz.js"
import { ledgerState, startTestServer } from "../test/support/server.js"

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "100000" },
    concurrency: { type: "string", default: "8" },
    seed: { type: "string", default: String(randomInt(1_000_000)) }
  }
})
const requests = Number(values.requests)
const concurrency = Number(values.concurrency)
const seed = Number(values.seed)

// LOG_LEVEL=error shows what answered a 5xx (the server runs in this process).
const server = await startTestServer({ LOG_LEVEL: process.env.LOG_LEVEL ?? "None" })
let failed = false
try {
  const account = await server.account({ plan: "enterprise", monthly_balance: 1_000_000, topup_balance: 1_000 })
  await seedCatalog({ url: server.url, adminToken: server.adminToken, key: account.key })
  const before = await ledgerState(server.db, account.accountId)
  const started = Date.now()
  console.log(`fuzz: ${requests} requests over ${routes.length} routes, ${concurrency} at a time, seed ${seed}`)
  const report = await runFuzz({ url: server.url, adminToken: server.adminToken, key: account.key }, {
    requests,
    concurrency,
    seed,
    onProgress: (sent) => {
      if (sent % 10_000 === 0) console.log(`  ${sent} sent (${Math.round((Date.now() - started) / 1000)} s)`)
    }
  })
  // Holds of requests still in flight when their client moved on: wait (10 s at most) for them to settle.
  const settleDeadline = Date.now() + 10_000
  let after = await ledgerState(server.db, account.accountId)
  while (after.pendingHolds > 0 && Date.now() < settleDeadline) {
    await Bun.sleep(50)
    after = await ledgerState(server.db, account.accountId)
  }
  const moved = before.monthly + before.topup - (after.monthly + after.topup)
  const statuses = [...report.statuses].sort(([a], [b]) => a.localeCompare(b))
  console.log(`sent ${report.sent} in ${Math.round((Date.now() - started) / 1000)} s`)
  console.log(`statuses: ${statuses.map(([status, n]) => `${status}: ${n}`).join(", ")}`)
  console.log(`ledger: charged (sum of X-Credits-Charged) ${report.charged}, wallet moved ${moved}; ` +
    `balance == sum(journal): ${after.monthly === after.journalMonthly && after.topup === after.journalTopup}; pending holds: ${after.pendingHolds}`)
  const ledgerOk = moved === report.charged && after.monthly === after.journalMonthly && after.topup === after.journalTopup &&
    after.pendingHolds === 0
  if (!ledgerOk) console.log("LEDGER MISMATCH")
  console.log(`problems: ${report.problems.length}`)
  for (const problem of report.problems.slice(0, 20)) console.log(`  ${problem}`)
  failed = !ledgerOk || report.problems.length > 0
} finally {
  await server.close()
}
process.exit(failed ? 1 : 0)
