/**
 * The embedded database (no DATABASE_URL) under concurrent callers, as a new user meets it:
 * `bun src/main.ts` on a fresh data directory, many tenants at once, an admin writing beside them.
 * PGlite is one backend session; every caller must still get its own answer.
 */
import { afterAll, describe, expect, test } from "bun:test"
import { existsSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import type { AccountBody, TransactionPage, WalletBody } from "./support/server.js"
import { embeddedLedger } from "./support/embeddedLedger.js"
import { adminClient, embeddedEnvironment, freePort, usingEmbeddedServer } from "./support/process.js"
import { tempDir } from "./support/tempDirs.js"

const dataDirs: Array<string> = []
afterAll(() => {
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true })
})

const tenantCount = 24
const loadMs = Number(process.env.EMBEDDED_LOAD_MS ?? 10_000)
const monthlyGrant = 100_000
/** Each tenant's top-up balance is its own (1000 + its index): searches spend monthly credits first, so it never moves. */
const topupOf = (index: number) => 1_000 + index
const searchTerms = ["routine", "money", "morning", "secret", "mistakes", "why", "budget", "skin"]

describe("the embedded database under concurrent callers", () => {
  test(`${tenantCount} tenants reading and paying at once while an admin creates accounts: each answer is the caller's own, every balance equals its journal`, async () => {
    const dataDir = tempDir("hookline-embedded-load-")
    dataDirs.push(dataDir)
    const problems: Array<string> = []
    const statuses = new Map<number, number>()
    const charged = new Map<string, number>()
    let answers = 0
    const record = (what: string, status: number, body: unknown, expected: number) => {
      answers++
      statuses.set(status, (statuses.get(status) ?? 0) + 1)
      if (status !== expected) problems.push(`${what}: ${status} ${JSON.stringify(body).slice(0, 300)}`)
      return status === expected
    }
    await usingEmbeddedServer({ dataDir, demoCatalogSize: 300, env: { RATE_LIMIT_ENABLED: "false" } }, async (server) => {
      const admin = adminClient(server, server.adminToken)
      const tenants = await Promise.all(Array.from({ length: tenantCount }, (_, index) =>
        admin.account({ monthly_balance: monthlyGrant, topup_balance: topupOf(index) })))
      const deadline = Date.now() + loadMs

      const tenantLoop = async (tenant: (typeof tenants)[number], index: number) => {
        for (let turn = 0; Date.now() < deadline; turn++) {
          const wallet = await server.request<WalletBody>("/v1/wallet", { key: tenant.key })
          if (record("wallet", wallet.status, wallet.body, 200) && wallet.body.topup_balance !== topupOf(index)) {
            problems.push(`tenant ${index} saw a wallet that is not its own: ${JSON.stringify(wallet.body)}`)
          }
          const term = searchTerms[(turn + index) % searchTerms.length]
          const search = await server.request(`/v1/hooks/search?q=${term}`, { key: tenant.key })
          if (record("search", search.status, search.body, 200)) {
            charged.set(tenant.accountId, (charged.get(tenant.accountId) ?? 0) + Number(search.headers.get("x-credits-charged")))
          }
          const history = await server.request<TransactionPage>("/v1/wallet/transactions?limit=20", { key: tenant.key })
          if (record("transactions", history.status, history.body, 200)) {
            // Every row after the opening monthly grant shows the tenant's own top-up balance.
            const foreign = history.body.data.filter((row) => row.balance_after.topup !== topupOf(index) && row.balance_after.topup !== 0)
            if (foreign.length > 0) problems.push(`tenant ${index} saw history rows that are not its own: ${JSON.stringify(foreign[0])}`)
          }
        }
      }
      const adminLoop = async () => {
        let created = 0
        while (Date.now() < deadline) {
          const account = await server.request<AccountBody>("/admin/accounts", {
            method: "POST",
            key: server.adminToken,
            body: { plan: "creator", topup_balance: 5 }
          })
          if (record("admin account", account.status, account.body, 200)) created++
        }
        return created
      }
      const [created] = await Promise.all([adminLoop(), ...tenants.map(tenantLoop)])

      // After the load: each tenant's monthly balance moved by exactly what its answers said they charged.
      for (const [index, tenant] of tenants.entries()) {
        const wallet = await server.request<WalletBody>("/v1/wallet", { key: tenant.key })
        expect(wallet.body).toMatchObject({
          monthly_balance: monthlyGrant - (charged.get(tenant.accountId) ?? 0),
          topup_balance: topupOf(index)
        })
      }
      console.log(`embedded load: ${answers} answers in ${loadMs} ms from ${tenantCount} tenants and an admin (${created} accounts created); ` +
        `statuses ${JSON.stringify(Object.fromEntries(statuses))}`)
      expect(problems.slice(0, 20)).toEqual([])
      expect(created).toBeGreaterThan(0)
      // Still answering after the load.
      expect((await fetch(`${server.url}/readyz`)).status).toBe(200)
    })

    const ledger = await embeddedLedger(dataDir)
    expect(ledger.size).toBeGreaterThan(tenantCount)
    const unbalanced = [...ledger.values()].filter((wallet) =>
      wallet.monthly !== wallet.journalMonthly || wallet.topup !== wallet.journalTopup || wallet.pendingHolds !== 0)
    expect(unbalanced).toEqual([])
  }, 120_000)

  test("first start: /readyz answers 503 until the demo data are in, then 200 on every later poll, under load", async () => {
    const dataDir = tempDir("hookline-embedded-ready-")
    dataDirs.push(dataDir)
    const port = freePort()
    const base = `http://127.0.0.1:${port}`
    const child = Bun.spawn([process.execPath, "src/main.ts"], {
      cwd: join(import.meta.dir, ".."),
      env: { ...embeddedEnvironment(dataDir, port, 2_000), HOST: "127.0.0.1", RATE_LIMIT_ENABLED: "false" },
      stdout: "pipe",
      stderr: "pipe"
    })
    const output = Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()])
    const answers: Array<string> = []
    try {
      // Every readiness answer from the first one the port gives, until the first 200.
      for (;;) {
        const ready = await fetch(`${base}/readyz`).then(async (r) => ({ status: r.status, body: await r.text() }), () => null)
        if (ready !== null) answers.push(ready.status === 200 ? "200" : `${ready.status} ${ready.body}`)
        if (ready?.status === 200) break
        if (child.exitCode !== null) throw new Error("the server exited during start-up")
        await Bun.sleep(20)
      }
      // Before: the port taken but the app not served yet, or the app served and the demo data on their way.
      const notReady = answers.slice(0, -1)
      expect(notReady.filter((answer) => !answer.startsWith("503 ") || !answer.includes("\"service_unavailable\""))).toEqual([])
      // Ready means the demo data are in: the key works and the catalog answers.
      expect(existsSync(join(dataDir, "demo.json"))).toBe(true)
      const { api_key: key } = JSON.parse(readFileSync(join(dataDir, "demo.json"), "utf8")) as { api_key: string }
      const search = await fetch(`${base}/v1/hooks/search?q=routine`, { headers: { authorization: `Bearer ${key}` } })
      expect(search.status).toBe(200)
      expect(((await search.json()) as { data: Array<unknown> }).data.length).toBeGreaterThan(0)
      // Later polls stay 200 while searches run beside them.
      const load = Promise.all(Array.from({ length: 8 }, async () => {
        for (let i = 0; i < 25; i++) await fetch(`${base}/v1/hooks/search?q=money`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.text())
      }))
      const later: Array<number> = []
      for (let i = 0; i < 50; i++) later.push(await fetch(`${base}/readyz`).then((r) => r.status))
      await load
      expect(later.filter((status) => status !== 200)).toEqual([])
    } catch (error) {
      child.kill("SIGTERM")
      console.log(`readiness answers: ${JSON.stringify(answers)}\nserver output:\n${(await output).join("\n")}`)
      throw error
    } finally {
      child.kill("SIGTERM")
      await child.exited
    }
  }, 120_000)
})
