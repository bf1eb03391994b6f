/**
 * Retries across a lost database connection: the admin grant and account creation store their
 * Idempotency-Key answer in the transaction of what they change, so a connection cut at COMMIT
 * never makes a retry run them twice. The server talks to PostgreSQL through a proxy of this
 * file's own that cuts the connection at the transaction's COMMIT: after PostgreSQL committed
 * (its CommandComplete never reaches the server), or before (the COMMIT never reaches PostgreSQL),
 * and can then refuse every connection for a while (the database unreachable).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect } from "effect"
import { FetchHttpClient } from "effect/http"
import { IdempotencyInProgress, makeHooklineClient } from "../src/client.js"
import { expectEnvelope } from "./support/envelope.js"
import { waitFor } from "./support/outage.js"
import type { pgProxy } from "./support/pgProxy.js"
import { startProxiedServer } from "./support/proxiedServer.js"
import type { AccountBody, ErrorBody, TestServer, WalletBody } from "./support/server.js"

const metricsToken = "outcome-unknown-metrics-token"

/** hookline_outcome_unknown_total as /metrics shows it (the registry is the process's: compare before and after). */
const outcomeUnknownCount = async () => {
  const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })).text()
  return Number(/^hookline_outcome_unknown_total(?:\{[^}]*\})? (\d+)/m.exec(text)?.[1] ?? 0)
}

let proxy: ReturnType<typeof pgProxy>
let server: TestServer
let closeServer: () => Promise<void>

beforeAll(async () => {
  ;({ close: closeServer, proxy, server } = await startProxiedServer({ METRICS_TOKEN: metricsToken }))
}, 60_000)
afterAll(() => closeServer())

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
    // The key stays held until the server, asking again in the background, finds it was not committed
    // and frees it (or its lock times out, 1 s here): the retry waits for that, then runs.
    const retry = await grant(accountId, "grant-unknown-rolled-back")
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(retry.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    const again = await grant(accountId, "grant-unknown-rolled-back")
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })
})

/** The statuses of the rows under an Idempotency-Key (none once it is freed). */
const keyRows = async (key: string) =>
  (await server.db.query("SELECT status FROM idempotency_keys WHERE key = $1", [key])).rows.map((row) => row.status as string)

/** The answer of a request whose transaction is held open on a session its server lost: outcome unknown, counted, no charge. */
const expectOutcomeUnknown = async (answer: Awaited<ReturnType<typeof grant>>, unknownBefore: number) => {
  expectEnvelope(answer, 503, "service_unavailable")
  expect(messageOf(answer)).toContain("its outcome is unknown")
  expect(messageOf(answer)).toContain("409 idempotency_in_progress")
  expect(answer.headers.get("retry-after")).not.toBeNull()
  expect(answer.headers.get("x-credits-charged")).toBeNull()
  expect(await outcomeUnknownCount()).toBe(unknownBefore + 1)
}

/** Retries while the outcome is unknown: each refused 409 in the envelope, none run, none counted again. */
const expectRefusedWhileUnknown = async (send: () => ReturnType<typeof grant>, unknownBefore: number) => {
  const retries = await Promise.all([send(), send(), send()])
  for (const retry of retries) {
    expectEnvelope(retry, 409, "idempotency_in_progress")
    expect(messageOf(retry)).toContain("its outcome is unknown")
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
  }
  expect(await outcomeUnknownCount()).toBe(unknownBefore + 1)
}

/** A fresh account, the unknown-outcome count before, and its first grant under `key`, the proxy armed to cut it `at`. */
const firstGrantCut = async (key: string, at: "holdCommit" | "cutBeforeCommit") => {
  const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
  const unknownBefore = await outcomeUnknownCount()
  proxy.arm(at, "pass", key)
  return { accountId, unknownBefore, first: await grant(accountId, key) }
}

describe("a grant whose session PostgreSQL keeps open after the server lost its connection before COMMIT", () => {
  test("committed later: 503 outcome unknown; retries 409 idempotency_in_progress while it is open; then the stored answer; one grant", async () => {
    const key = "grant-held-then-committed"
    const { accountId, unknownBefore, first } = await firstGrantCut(key, "holdCommit")
    await expectOutcomeUnknown(first, unknownBefore)
    await expectRefusedWhileUnknown(() => grant(accountId, key), unknownBefore)
    // The typed client knows the answer: its error is the IdempotencyInProgress class.
    const viaClient = await Effect.runPromise(Effect.gen(function*() {
      const client = yield* makeHooklineClient({ baseUrl: server.url, apiKey: server.adminToken, idempotencyKey: key })
      return yield* Effect.flip(client.admin.grantCredits({ params: { id: accountId }, payload: { bucket: "topup", amount: 25, reason: "invoice 77" } }))
    }).pipe(Effect.provide(FetchHttpClient.layer)))
    expect(viaClient).toBeInstanceOf(IdempotencyInProgress)
    expect(await grantsOf(accountId)).toEqual({ grants: 0, topup: 0 })

    await proxy.endHeld("commit")
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
    const retries = await Promise.all([grant(accountId, key), grant(accountId, key)])
    for (const retry of retries) {
      expect(retry.status).toBe(200)
      expect(retry.headers.get("idempotent-replayed")).toBe("true")
      expect(retry.headers.get("original-request-id")).toBe(first.headers.get("x-request-id"))
      expect(retry.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    }
    expect(retries[1].body).toEqual(retries[0].body)
    expect(await keyRows(key)).toEqual(["completed"])
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })

  test("rolled back later: 409 while it is open; the server frees the key once it is gone; the retry runs once; one grant", async () => {
    const key = "grant-held-then-rolled-back"
    const { accountId, unknownBefore, first } = await firstGrantCut(key, "holdCommit")
    await expectOutcomeUnknown(first, unknownBefore)
    await expectRefusedWhileUnknown(() => grant(accountId, key), unknownBefore)

    await proxy.endHeld("rollback")
    // Nobody retries meanwhile: the server, asking in the background, learns it did not commit and frees the key.
    await waitFor("the key freed by the server", 15_000, async () => (await keyRows(key)).length === 0)
    expect(await grantsOf(accountId)).toEqual({ grants: 0, topup: 0 })
    const retry = await grant(accountId, key)
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(retry.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    const again = await grant(accountId, key)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(again.body).toEqual(retry.body)
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })
})

describe("a grant cut before COMMIT with the database still reachable", () => {
  test("503 saying it was not completed, the key freed at once, not counted as unknown; the retry runs once; one grant", async () => {
    const key = "grant-cut-before-commit"
    const { accountId, unknownBefore, first } = await firstGrantCut(key, "cutBeforeCommit")
    expectEnvelope(first, 503, "service_unavailable")
    expect(messageOf(first)).toContain("not completed")
    expect(first.headers.get("x-credits-charged")).toBeNull()
    expect(await outcomeUnknownCount()).toBe(unknownBefore)
    expect(await keyRows(key)).toEqual([])
    expect(await grantsOf(accountId)).toEqual({ grants: 0, topup: 0 })
    const retry = await grant(accountId, key)
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBeNull()
    expect(retry.body).toMatchObject({ object: "wallet", topup_balance: 25 })
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
  })
})

describe("concurrent requests with one Idempotency-Key", () => {
  test("run once: one grant; every answer the grant's wallet (or 409 while it commits), all but the first replayed", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const answers = await Promise.all(Array.from({ length: 8 }, () => grant(accountId, "grant-concurrent")))
    const answered = answers.filter((answer) => answer.status === 200)
    for (const answer of answers.filter((one) => one.status !== 200)) expectEnvelope(answer, 409, "idempotency_in_progress")
    expect(answered.filter((answer) => answer.headers.get("idempotent-replayed") === null)).toHaveLength(1)
    for (const answer of answered) expect(answer.body).toEqual(answered[0].body)
    expect(answered[0].body).toMatchObject({ object: "wallet", topup_balance: 25 })
    expect(await grantsOf(accountId)).toEqual({ grants: 1, topup: 25 })
    const later = await grant(accountId, "grant-concurrent")
    expect(later.headers.get("idempotent-replayed")).toBe("true")
    expect(later.body).toEqual(answered[0].body)
  })
})

describe("an account created with its connection cut at COMMIT", () => {
  test("its session held open, then committed: 503 outcome unknown, 409 while open, then the same account; one account", async () => {
    const name = `Held at commit ${Date.now()}`
    // Not the name: the proxy holds the COMMIT that follows the statement returning the key (the answer's UPDATE).
    const key = `create-${name}`
    const create = () =>
      server.admin<AccountBody>("/admin/accounts", { method: "POST", headers: { "idempotency-key": key }, body: { plan: "pro", name } })
    const accountsNamed = async () => (await server.db.query("SELECT id FROM accounts WHERE name = $1", [name])).rows
    const unknownBefore = await outcomeUnknownCount()
    proxy.arm("holdCommit", "pass", key)
    const first = await create()
    expectEnvelope(first, 503, "service_unavailable")
    expect(messageOf(first)).toContain("its outcome is unknown")
    expect(await outcomeUnknownCount()).toBe(unknownBefore + 1)
    for (const retry of await Promise.all([create(), create()])) expectEnvelope(retry, 409, "idempotency_in_progress")
    expect(await accountsNamed()).toEqual([])
    await proxy.endHeld("commit")
    const retry = await create()
    expect(retry.status).toBe(200)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    expect(retry.body).toMatchObject({ object: "account", name, plan: "pro" })
    expect(await accountsNamed()).toEqual([{ id: retry.body.id }])
  })


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
