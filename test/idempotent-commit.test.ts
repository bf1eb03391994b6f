/**
 * Retries across a lost database connection: the admin grant and account creation store their
 * Idempotency-Key answer in the transaction of what they change, so a connection cut at COMMIT
 * never makes a retry run them twice. The server talks to PostgreSQL through a proxy of this
 * file's own that cuts the connection at the transaction's COMMIT: after PostgreSQL committed
 * (its CommandComplete never reaches the server), or before (the COMMIT never reaches PostgreSQL),
 * and can then refuse every connection for a while (the database unreachable).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { expectEnvelope } from "./support/envelope.js"
import { pgProxy } from "./support/pgProxy.js"
import { type AccountBody, createDatabase, dropDatabase, type ErrorBody, startTestServer, type TestServer, type WalletBody } from "./support/server.js"

const metricsToken = "outcome-unknown-metrics-token"

/** hookline_outcome_unknown_total as /metrics shows it (the registry is the process's: compare before and after). */
const outcomeUnknownCount = async () => {
  const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })).text()
  return Number(/^hookline_outcome_unknown_total(?:\{[^}]*\})? (\d+)/m.exec(text)?.[1] ?? 0)
}

let databaseUrl: string
let proxy: ReturnType<typeof pgProxy>
let server: TestServer

beforeAll(async () => {
  databaseUrl = await createDatabase()
  const direct = new URL(databaseUrl)
  proxy = pgProxy(direct)
  const proxied = new URL(databaseUrl)
  proxied.hostname = "127.0.0.1"
  proxied.port = String(await proxy.listen())
  server = await startTestServer(
    {
      DATABASE_URL: proxied.toString(),
      IDEMPOTENCY_LOCK_TIMEOUT: "1 second",
      IDEMPOTENCY_POLL_INTERVAL: "20 millis",
      METRICS_TOKEN: metricsToken
    },
    { databaseUrl, background: false }
  )
}, 60_000)
afterAll(async () => {
  await server.close()
  await proxy.close()
  await dropDatabase(databaseUrl)
})

const messageOf = (response: { readonly body: unknown }) => (response.body as ErrorBody).error.message

const grant = (accountId: string, key: string) =>
  server.admin<WalletBody>(`/admin/accounts/${accountId}/credits`, {
    method: "POST",
    headers: { "idempotency-key": key },
    body: { bucket: "topup", amount: 25, reason: "invoice 77" }
  })

/** The account's admin grants of 25 (the test's), and its top-up balance. */
const grantsOf = async (accountId: string) => {
  const { rows } = await server.db.query(
    "SELECT count(*)::int AS grants FROM credit_journal WHERE account_id = $1 AND entry_type = 'grant' AND reason = 'invoice 77'",
    [accountId]
  )
  const wallet = await server.db.query("SELECT topup_balance::int FROM wallets WHERE account_id = $1", [accountId])
  return { grants: rows[0].grants as number, topup: wallet.rows[0].topup_balance as number }
}

describe("a grant whose connection is cut at COMMIT", () => {
  test("after PostgreSQL committed: the request still answers the wallet, and a retry replays it; one grant", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    proxy.arm("cutAfterCommit", "pass")
    const cutsBefore = proxy.cuts()
    const first = await grant(accountId, "grant-after-commit")
    expect(proxy.cuts()).toBe(cutsBefore + 1)
    expect(first.status).toBe(200)
    expect(first.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    const retry = await grant(accountId, "grant-after-commit")
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    expect(retry.body).toEqual(first.body)
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })

  test("after PostgreSQL committed, the database then unreachable: 503 saying the outcome is unknown; the retry replays; one grant", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const unknownBefore = await outcomeUnknownCount()
    proxy.arm("cutAfterCommit", "down")
    const first = await grant(accountId, "grant-unknown-committed")
    expectEnvelope(first, 503, "service_unavailable")
    expect(messageOf(first)).toContain("its outcome is unknown")
    expect(first.headers.get("retry-after")).not.toBeNull()
    // While the database is away the retry cannot run either.
    expectEnvelope(await grant(accountId, "grant-unknown-committed"), 503, "service_unavailable")
    proxy.restore()
    // Counted once: the retry refused while the database was away ran nothing, so its outcome is known.
    expect(await outcomeUnknownCount()).toBe(unknownBefore + 1)
    const retry = await grant(accountId, "grant-unknown-committed")
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    expect(retry.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })

  test("before PostgreSQL got the COMMIT, the database then unreachable: 503 outcome unknown; the retry runs it once", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    proxy.arm("cutBeforeCommit", "down", "grant-unknown-rolled-back")
    const first = await grant(accountId, "grant-unknown-rolled-back")
    expectEnvelope(first, 503, "service_unavailable")
    expect(messageOf(first)).toContain("its outcome is unknown")
    proxy.restore()
    expect(await grantsOf(accountId)).toEqual({ grants: 0, topup: 0 })
    // The key stays held until its lock times out (1 s here): the retry waits for it, then runs.
    const retry = await grant(accountId, "grant-unknown-rolled-back")
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(retry.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    const again = await grant(accountId, "grant-unknown-rolled-back")
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })
})

describe("an account created with its connection cut at COMMIT", () => {
  test("after PostgreSQL committed, then unreachable: 503 outcome unknown; the retry answers the same account; one account", async () => {
    const name = `Cut at commit ${Date.now()}`
    const create = () =>
      server.admin<AccountBody>("/admin/accounts", { method: "POST", headers: { "idempotency-key": name }, body: { plan: "pro", name } })
    proxy.arm("cutAfterCommit", "down")
    const first = await create()
    expectEnvelope(first, 503, "service_unavailable")
    expect(messageOf(first)).toContain("its outcome is unknown")
    proxy.restore()
    const retry = await create()
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    const { rows } = await server.db.query("SELECT id FROM accounts WHERE name = $1", [name])
    expect(rows).toEqual([{ id: retry.body.id }])
  })
})
