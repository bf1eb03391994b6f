/**
 * A charge whose database connection is lost after PostgreSQL ran it: the server cannot see
 * whether it was taken, so its 503 says the outcome is unknown (never "not completed"), carries
 * no X-Credits-Charged, and is counted; the credit history tells the truth under the request id.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { expectEnvelope } from "./support/envelope.js"
import { pgProxy } from "./support/pgProxy.js"
import { createDatabase, dropDatabase, type ErrorBody, startTestServer, type TestServer, type TransactionPage } from "./support/server.js"

const metricsToken = "charge-outcome-metrics-token"
let databaseUrl: string
let proxy: ReturnType<typeof pgProxy>
let server: TestServer

beforeAll(async () => {
  databaseUrl = await createDatabase()
  proxy = pgProxy(new URL(databaseUrl))
  const proxied = await proxy.listenAsUrl()
  // One statement a write (no pipelining), so the cut connection carries the charge alone.
  server = await startTestServer({ DATABASE_URL: proxied, DB_PIPELINE: "false", METRICS_TOKEN: metricsToken }, {
    databaseUrl,
    background: false
  })
}, 60_000)
afterAll(async () => {
  await server.close()
  await proxy.close()
  await dropDatabase(databaseUrl)
})

const outcomeUnknownCount = async () => {
  const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })).text()
  return Number(/^hookline_outcome_unknown_total(?:\{[^}]*\})? (\d+)/m.exec(text)?.[1] ?? 0)
}

describe("a charge whose connection is lost after PostgreSQL ran it", () => {
  test("a hook's charge: 503 saying the outcome is unknown, no charge header, counted; the history shows it was taken", async () => {
    await server.admin("/admin/catalog/categories", { method: "PUT", body: [{ slug: "fitness", name: "Fitness" }] })
    const imported = await server.admin<{ inserted: number }>("/admin/catalog/hooks", {
      method: "POST",
      body: [{ text: "The one stretch nobody does", platform: "tiktok", source_url: "https://tiktok.example/1", category: "fitness" }]
    })
    expect(imported.body.inserted).toBe(1)
    const { key, accountId } = await server.account({ monthly_balance: 0, topup_balance: 10 })
    const hook = await server.request<{ data: Array<{ id: string }> }>("/v1/hooks/list?category=fitness", { key })
    const hookId = hook.body.data[0].id
    const topupOf = async () =>
      (await server.db.query("SELECT topup_balance::int AS topup FROM wallets WHERE account_id = $1", [accountId])).rows[0].topup as number
    const topupBefore = await topupOf()
    const before = await outcomeUnknownCount()

    // The one-credit charge of a hook is one statement: PostgreSQL runs it, its answer is cut off.
    proxy.cutReplyTo("INSERT INTO credit_journal", "pass")
    const cut = await server.request<ErrorBody>(`/v1/hooks/${hookId}`, { key })
    expectEnvelope(cut, 503, "service_unavailable")
    expect(cut.body.error.message).toContain("its outcome is unknown")
    expect(cut.headers.get("x-credits-charged")).toBeNull()
    expect(cut.headers.get("retry-after")).not.toBeNull()
    expect(await outcomeUnknownCount()).toBe(before + 1)

    // What happened is in the credit history, under the request's id: PostgreSQL took the credit.
    const requestId = cut.headers.get("x-request-id")
    const history = await server.request<TransactionPage>("/v1/wallet/transactions", { key })
    expect(history.body.data.filter((row) => row.request_id === requestId).map((row) => row.amount)).toEqual([-1])
    expect(await topupOf()).toBe(topupBefore - 1)
    // The next call is served as usual, with its charge header.
    const again = await server.request(`/v1/hooks/${hookId}`, { key })
    expect(again.status).toBe(200)
    expect(again.headers.get("x-credits-charged")).toBe("1")
  })
})
