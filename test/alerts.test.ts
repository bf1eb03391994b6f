/**
 * Low-balance alerts: wallet.low_balance once per crossing below the threshold,
 * written with the debit that crossed it; wallet.depleted on the first 402 since credits were
 * granted; both re-armed by a grant or a new period. Debits are driven through the Ledger
 * service on the server's database, as the metered routes drive them.
 */
import { SqlClient } from "effect/sql"
import { beforeAll, describe, expect, test } from "bun:test"
import { Effect, Result } from "effect"
import { randomBytes } from "node:crypto"
import { Webhook as StandardWebhook } from "standardwebhooks"
import { Ledger, type Operation } from "../src/Ledger/Ledger.js"
import { expectEnvelope } from "./support/envelope.js"
import { eventually } from "./support/receiver.js"
import {
  ledgerState,
  type TestServer,
  type WalletAlertBody,
  type WalletEventData,
  type WebhookEvent,
  type WebhookSecretBody
} from "./support/server.js"
import { type WebhookFixture, webhookFixture } from "./support/webhookFixture.js"

const env: Record<string, string> = {
  WEBHOOK_ALLOW_PRIVATE: "true",
  WEBHOOK_ALLOW_INSECURE: "true",
  WEBHOOK_RETRY_SCHEDULE: "100ms",
  WEBHOOK_POLL_INTERVAL: "100ms",
  WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64url")
}

type WalletEvent = WebhookEvent<"wallet.low_balance" | "wallet.depleted", WalletEventData>

const fixture = webhookFixture(env)
let server: TestServer
let runtime: WebhookFixture["runtime"]
const receiver = fixture.receiver
beforeAll(() => {
  server = fixture.server
  runtime = fixture.runtime
})


/** An account with `topup` credits, a webhook to a fresh receiver, and the threshold set. */
const alerted = async (topup: number, threshold: number | null, events?: ReadonlyArray<string>) => {
  const target = receiver()
  const account = await server.account({ plan: "pro", monthly_balance: 0, topup_balance: topup })
  const put = await server.request<WebhookSecretBody>("/v1/webhooks", {
    method: "PUT",
    key: account.key,
    body: events === undefined ? { url: target.url } : { url: target.url, events }
  })
  expect(put.status).toBe(200)
  if (threshold !== null) {
    const set = await server.request<WalletAlertBody>("/v1/wallet/alert", { method: "PUT", key: account.key, body: { threshold } })
    expect(set.status).toBe(200)
  }
  return { ...account, target, secret: put.body.secret }
}

/** A metered request: reserve, then settle `charged`; false when refused (402). */
const spend = (accountId: string, reserved: number, charged: number, operation: Operation = "hook") =>
  runtime.runPromise(Effect.gen(function*() {
    const ledger = yield* Ledger
    const hold = yield* Effect.result(ledger.reserve(accountId, reserved, { operation, expires: true }))
    if (Result.isFailure(hold)) return false
    yield* ledger.settle(hold.success.id, charged)
    return true
  }))

const grant = (accountId: string, amount: number) =>
  server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount } })

const walletEvents = async (accountId: string) => {
  const { rows } = await server.db.query<{ body: string }>(
    "SELECT body FROM webhook_deliveries WHERE account_id = $1 AND event_type LIKE 'wallet.%' ORDER BY id",
    [accountId]
  )
  return rows.map((row) => JSON.parse(row.body) as WalletEvent)
}

describe("wallet.low_balance", () => {
  test("sent once when a debit crosses below the threshold, signed; not again until a grant re-arms it", async () => {
    const { accountId, key, target, secret } = await alerted(12, 10)
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body).toEqual({ object: "wallet_alert", threshold: 10, armed: true })

    expect(await spend(accountId, 2, 2)).toBe(true) // 10: at the threshold, not below
    expect(await walletEvents(accountId)).toEqual([])
    expect(await spend(accountId, 1, 1)).toBe(true) // 9: crossed
    expect(await spend(accountId, 1, 1)).toBe(true) // 8: still below, no second event
    const events = await walletEvents(accountId)
    expect(events.map((e) => [e.type, e.data.topup_balance, e.data.low_balance_threshold])).toEqual([["wallet.low_balance", 9, 10]])
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body.armed).toBe(false)

    await eventually("the low-balance event delivered", () => target.requests.length === 1)
    const verified = new StandardWebhook(secret).verify(target.requests[0].body, target.requests[0].headers) as WalletEvent
    expect(verified).toMatchObject({ id: events[0].id, type: "wallet.low_balance", data: { object: "wallet", monthly_balance: 0 } })
    expect(target.requests[0].headers["webhook-id"]).toBe(events[0].id)

    // A grant that stays below does not re-arm; one that reaches the threshold does.
    await grant(accountId, 1)
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body.armed).toBe(false)
    await grant(accountId, 5)
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body.armed).toBe(true)
    expect(await spend(accountId, 5, 5)).toBe(true)
    expect((await walletEvents(accountId)).map((e) => e.data.topup_balance)).toEqual([9, 9])
  })

  test("a hold that dips below and gives its credits back alerts once and does not re-arm", async () => {
    const { accountId } = await alerted(11, 10)
    expect(await spend(accountId, 2, 0, "search")).toBe(true) // 9 while held, 11 after the release
    expect(await spend(accountId, 2, 0, "search")).toBe(true)
    expect((await walletEvents(accountId)).map((e) => e.type)).toEqual(["wallet.low_balance"])
  })

  test("a debit rolled back takes its event with it; twenty concurrent debits crossing send exactly one", async () => {
    const { accountId } = await alerted(30, 25)
    await runtime.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const ledger = yield* Ledger
      yield* ledger.reserve(accountId, 10, { operation: "hook" }).pipe(
        Effect.andThen(Effect.fail("the request failed after its debit")),
        sql.withTransaction,
        Effect.ignore
      )
    }))
    expect(await walletEvents(accountId)).toEqual([])
    const results = await Promise.all(Array.from({ length: 20 }, () => spend(accountId, 1, 1)))
    expect(results.filter(Boolean)).toHaveLength(20)
    const events = await walletEvents(accountId)
    expect(events.map((e) => [e.type, e.data.topup_balance])).toEqual([["wallet.low_balance", 24]])
    const state = await ledgerState(server.db, accountId)
    expect(state.topup).toBe(10)
    expect(state.topup).toBe(state.journalTopup)
  })

  test("a new period whose grant reaches the threshold re-arms it", async () => {
    const { accountId, key } = await server.account({ plan: "pro" }) // 1,000 monthly credits
    await server.request("/v1/wallet/alert", { method: "PUT", key, body: { threshold: 999 } })
    expect(await spend(accountId, 2, 2)).toBe(true)
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body.armed).toBe(false)
    await server.db.query("UPDATE wallets SET monthly_period_end = now() - interval '1 second' WHERE account_id = $1", [accountId])
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body.armed).toBe(false)
    expect((await server.request("/v1/wallet", { key })).status).toBe(200) // applies the rollover
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body).toEqual({ object: "wallet_alert", threshold: 999, armed: true })
  })

  test("a webhook that did not select wallet events gets none; without a threshold nothing is sent", async () => {
    const selective = await alerted(12, 10, ["prediction.succeeded"])
    expect(await spend(selective.accountId, 5, 5)).toBe(true)
    expect(await walletEvents(selective.accountId)).toEqual([])
    const unset = await alerted(12, null)
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key: unset.key })).body).toEqual({ object: "wallet_alert", threshold: null, armed: false })
    expect(await spend(unset.accountId, 5, 5)).toBe(true)
    expect(await walletEvents(unset.accountId)).toEqual([])
  })

  test("a threshold set while already below is not armed; DELETE removes it; bad thresholds are 422; plan loss keeps GET", async () => {
    const { accountId, key } = await alerted(5, null)
    const set = await server.request<WalletAlertBody>("/v1/wallet/alert", { method: "PUT", key, body: { threshold: 10 } })
    expect(set.body).toEqual({ object: "wallet_alert", threshold: 10, armed: false })
    for (const body of [{ threshold: 0 }, { threshold: -5 }, { threshold: 1.5 }, { threshold: "10" }, {}, { threshold: 10, extra: true }]) {
      expectEnvelope(await server.request("/v1/wallet/alert", { method: "PUT", key, body }), 422, "validation_error")
    }
    expect((await server.request<WalletAlertBody>("/v1/wallet/alert", { key })).body.threshold).toBe(10)
    const cleared = await server.request<WalletAlertBody>("/v1/wallet/alert", { method: "DELETE", key })
    expect(cleared.body).toEqual({ object: "wallet_alert", threshold: null, armed: false })
    expectEnvelope(await server.request("/v1/wallet/alert"), 401, "invalid_api_key")

    await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { plan: "free" } })
    await eventually("the plan loss seen", async () =>
      (await server.request("/v1/wallet/alert", { method: "PUT", key, body: { threshold: 3 } })).status === 403)
    expectEnvelope(await server.request("/v1/wallet/alert", { method: "PUT", key, body: { threshold: 3 } }), 403, "api_not_enabled")
    expect((await server.request("/v1/wallet/alert", { key })).status).toBe(200)
  })
})

describe("wallet.depleted", () => {
  test("the first 402 after credits were granted sends it once; a grant re-arms it; nothing is charged", async () => {
    const { accountId, key, target } = await alerted(1, null)
    const before = await ledgerState(server.db, accountId)
    const refused = await server.request("/v1/hooks/search?q=money", { key })
    expectEnvelope(refused, 402, "insufficient_credits")
    expectEnvelope(await server.request("/v1/hooks/search?q=money", { key }), 402, "insufficient_credits")
    expect(await ledgerState(server.db, accountId)).toEqual(before)
    const events = await walletEvents(accountId)
    expect(events.map((e) => [e.type, e.data.topup_balance])).toEqual([["wallet.depleted", 1]])
    await eventually("the depleted event delivered", () => target.requests.length === 1)

    await grant(accountId, 1)
    expect(await spend(accountId, 2, 2)).toBe(true)
    expect(await spend(accountId, 1, 1)).toBe(false)
    expect(await spend(accountId, 1, 1)).toBe(false)
    expect((await walletEvents(accountId)).map((e) => [e.type, e.data.topup_balance])).toEqual([
      ["wallet.depleted", 1],
      ["wallet.depleted", 0]
    ])
  })

  test("an account that never had credits gets no wallet.depleted", async () => {
    const { accountId } = await alerted(0, null)
    expect(await spend(accountId, 1, 1)).toBe(false)
    expect(await walletEvents(accountId)).toEqual([])
  })
})
