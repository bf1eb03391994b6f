/**
 * DB_STATEMENT_TIMEOUT: every statement a tenant's request runs is cancelled
 * by PostgreSQL past the timeout, and the request answers 503 `service_unavailable` with the
 * envelope, charging nothing. A table locked by the test (ACCESS EXCLUSIVE, as a long migration or
 * a stuck transaction would) makes any statement on it wait past the timeout on purpose. The
 * admin import lifts the timeout: it waits the lock out and succeeds.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { newId } from "../src/Ids.js"
import { expectEnvelope } from "./support/envelope.js"
import { type ErrorBody, ledgerState, startTestServer, statementsWaitingOnLocks, type TestServer } from "./support/server.js"

const timeoutMs = 400
const statementTimedOutMessage = "The database took too long to answer and the request was cancelled; nothing was charged. Retry in a moment."

let server: TestServer
let key: string
let accountId: string

beforeAll(async () => {
  // No background fibers: the sweepers would wait on the test's locks too.
  server = await startTestServer({ DB_STATEMENT_TIMEOUT: `${timeoutMs} millis` }, { background: false })
  ;({ key, accountId } = await server.account({ plan: "pro", topup_balance: 50 }))
})
afterAll(async () => {
  await server.close()
})

/** Runs `body` while another session holds `table` locked, then releases the lock. */
const whileLocked = async <T>(table: string, body: () => Promise<T>): Promise<T> => {
  const session = await server.db.connect()
  try {
    await session.query("BEGIN")
    await session.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
    return await body()
  } finally {
    await session.query("ROLLBACK")
    session.release()
  }
}

/**
 * The answer to `path` while `table` is locked, and how many of the server's statements still wait
 * on the lock then. A request answered while its statement still waits would leave it to run on
 * (and take a connection) once the lock goes: PostgreSQL must have stopped it by the time the
 * request is answered.
 */
const requestWhileLocked = (table: string, path: string) =>
  whileLocked(table, async () => {
    const response = await server.request<ErrorBody>(path, { key })
    return { response, stillWaiting: await statementsWaitingOnLocks(server.db) }
  })

const journalRows = async () =>
  (await server.db.query<{ n: number }>("SELECT count(*)::int AS n FROM credit_journal WHERE account_id = $1", [accountId])).rows[0].n

describe("a tenant query over DB_STATEMENT_TIMEOUT", () => {
  const cases: ReadonlyArray<readonly [string, string, string]> = [
    ["the wallet", "wallets", "/v1/wallet"],
    ["the credit history", "credit_journal", "/v1/wallet/transactions"],
    ["the usage summary", "credit_journal", "/v1/wallet/usage"],
    ["a search's reserve", "wallets", "/v1/hooks/search?q=anything"],
    ["a prediction", "predictions", `/v1/predict/${newId("pred")}`],
    ["the webhook", "webhooks", "/v1/webhooks"],
    ["the webhook deliveries", "webhook_deliveries", "/v1/webhooks/deliveries"]
  ]
  for (const [what, table, path] of cases) {
    test(`${what} (${table} locked) answers 503 service_unavailable and charges nothing`, async () => {
      const before = await ledgerState(server.db, accountId)
      const journalBefore = await journalRows()
      const { response, stillWaiting } = await requestWhileLocked(table, path)
      expect(response.status).toBe(503)
      expectEnvelope(response, 503, "service_unavailable")
      // The statement timeout's own answer (PostgreSQL cancelled the statement), not another 503.
      expect(response.body.error.message).toBe(statementTimedOutMessage)
      expect(response.headers.get("x-credits-charged")).toBeNull()
      expect(stillWaiting).toBe(0)
      expect(await ledgerState(server.db, accountId)).toEqual(before)
      expect(await journalRows()).toBe(journalBefore)
      // Once the lock is gone the same request answers normally.
      expect((await server.request(path, { key })).status).not.toBe(503)
    })
  }

  test("a search cancelled after its reserve refunds the hold (the search tables locked)", async () => {
    const before = await ledgerState(server.db, accountId)
    const { response, stillWaiting } = await requestWhileLocked("hook_search, hook_search_postings", "/v1/hooks/search?q=slowpoke")
    expect(response.status).toBe(503)
    expectEnvelope(response, 503, "service_unavailable")
    expect(response.body.error.message).toBe(statementTimedOutMessage)
    expect(stillWaiting).toBe(0)
    const after = await ledgerState(server.db, accountId)
    expect(after).toEqual(before)
    expect(after.monthly).toBe(after.journalMonthly)
    expect(after.topup).toBe(after.journalTopup)
    const { rows } = await server.db.query<{ status: string }>(
      "SELECT status FROM holds WHERE account_id = $1 AND operation = 'search' ORDER BY created_at DESC LIMIT 1",
      [accountId]
    )
    expect(rows[0].status).toBe("refunded")
  })
})

describe("work exempt from the timeout", () => {
  test("the admin import waits out a lock longer than the timeout and succeeds", async () => {
    const session = await server.db.connect()
    await session.query("BEGIN")
    await session.query("LOCK TABLE hooks IN ACCESS EXCLUSIVE MODE")
    let answered = false
    const importing = server.admin<{ inserted: number }>("/admin/catalog/hooks", {
      method: "POST",
      rawBody: JSON.stringify({ text: "A hook imported past the timeout", platform: "tiktok", source_url: "https://tiktok.example/slow/1" }),
      headers: { "content-type": "application/x-ndjson" }
    }).finally(() => (answered = true))
    try {
      // Released once PostgreSQL's own clock shows the import's statement waiting three timeouts long, still alive.
      const deadline = Date.now() + 30_000
      for (;;) {
        const { rows: [waiting] } = await session.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'hookline' AND wait_event_type = 'Lock'
              AND clock_timestamp() - query_start > $1 * interval '1 millisecond'`,
          [timeoutMs * 3]
        )
        if (waiting.n > 0) break
        if (answered) throw new Error(`the import was answered while the lock was held: ${JSON.stringify(await importing)}`)
        if (Date.now() > deadline) throw new Error("the import's statement never waited three timeouts on the lock")
        await Bun.sleep(20)
      }
    } finally {
      await session.query("ROLLBACK")
      session.release()
    }
    const imported = await importing
    expect(imported.status).toBe(200)
    expect(imported.body.inserted).toBe(1)
  })
})
