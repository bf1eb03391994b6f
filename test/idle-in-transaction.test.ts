/**
 * DB_IDLE_IN_TRANSACTION_TIMEOUT: a transaction PostgreSQL keeps open for a connection the server
 * lost (its session open, its COMMIT never sent) is ended by PostgreSQL once it has sat idle that
 * long, so the wallet and the Idempotency-Key it locked are usable again.
 */
import { afterAll, beforeAll, expect, test } from "bun:test"
import { expectEnvelope } from "./support/envelope.js"
import { waitFor } from "./support/outage.js"
import type { pgProxy } from "./support/pgProxy.js"
import { startProxiedServer } from "./support/proxiedServer.js"
import type { TestServer, WalletBody } from "./support/server.js"

let proxy: ReturnType<typeof pgProxy>
let server: TestServer
let closeServer: () => Promise<void>

beforeAll(async () => {
  ;({ close: closeServer, proxy, server } = await startProxiedServer({ DB_IDLE_IN_TRANSACTION_TIMEOUT: "1 second" }))
}, 60_000)
afterAll(() => closeServer())

const grant = (accountId: string, headers: Record<string, string> = {}) =>
  server.admin<WalletBody>(`/admin/accounts/${accountId}/credits`, { method: "POST", headers, body: { bucket: "topup", amount: 25 } })

/** The server's sessions inside a transaction that sends nothing. */
const idleInTransaction = async () =>
  (await server.db.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'"
  )).rows[0].n as number

test("a grant's transaction held open for a lost connection is ended by PostgreSQL: the key freed, the wallet usable, the retry runs once", async () => {
  const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
  const key = "grant-held-idle"
  proxy.arm("holdCommit", "pass", key)
  const first = await grant(accountId, { "idempotency-key": key })
  // Outcome unknown, or, when PostgreSQL ended the session while the server was asking, not completed.
  expectEnvelope(first, 503, "service_unavailable")

  await waitFor("PostgreSQL to end the idle transaction", 30_000, async () => (await idleInTransaction()) === 0)
  // The server, asking in the background, finds the key's transaction rolled back and frees it.
  await waitFor("the key freed", 30_000, async () =>
    (await server.db.query("SELECT 1 FROM idempotency_keys WHERE key = $1", [key])).rows.length === 0)
  const wallet = await server.db.query("SELECT topup_balance::int AS topup FROM wallets WHERE account_id = $1", [accountId])
  expect(wallet.rows).toEqual([{ topup: 0 }])

  // The wallet row is free: a grant without a key goes through, and the retry runs once.
  expect((await grant(accountId)).body).toMatchObject({ topup_balance: 25 })
  const retry = await grant(accountId, { "idempotency-key": key })
  expect(retry.status).toBe(200)
  expect(retry.headers.get("idempotent-replayed")).toBeNull()
  expect(retry.body).toMatchObject({ topup_balance: 50 })
  const journal = await server.db.query(
    "SELECT count(*)::int AS grants, sum(amount)::int AS total FROM credit_journal WHERE account_id = $1 AND entry_type = 'grant' AND bucket = 'topup'",
    [accountId]
  )
  expect(journal.rows).toEqual([{ grants: 2, total: 50 }])
})

test("the admin import, waiting inside its transaction for its upload's next bytes past the timeout, is not ended", async () => {
  const record = (n: number) =>
    new TextEncoder().encode(JSON.stringify({ text: `Idle import wren ${n}`, platform: "tiktok", source_url: `https://idle.example/${n}` }) + "\n")
  let sendRest = () => {}
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(record(1))
      sendRest = () => {
        controller.enqueue(record(2))
        controller.close()
      }
    }
  })
  const answer = fetch(`${server.url}/admin/catalog/hooks`, {
    method: "POST",
    headers: { authorization: `Bearer ${server.adminToken}`, "content-type": "application/x-ndjson" },
    body
  })
  // Its session sits in its transaction, sending nothing, for twice the timeout before the rest arrives.
  await waitFor("the import idle in its transaction past the timeout", 30_000, async () =>
    (await server.db.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND state_change < now() - interval '2 seconds'"
    )).rows[0].n === 1)
  sendRest()
  const response = await answer
  expect(response.status).toBe(200)
  expect(await response.json()).toMatchObject({ object: "import_result", inserted: 2, rejected_count: 0 })
})
