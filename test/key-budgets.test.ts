/**
 * Key budgets end to end: a key's spend limit set at creation, by PATCH /admin/keys/{id} and the
 * admin CLI; 402 spend_limit_reached past it with nothing charged; the spend readable at
 * GET /v1/keys/current and in usage by key; key.spend_limit_reached once per period; and races:
 * concurrent debits of one key never pass its limit, and what they give back returns exactly.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Effect, Result } from "effect"
import { rmSync } from "node:fs"
import { join } from "node:path"
import { Accounts } from "../src/Admin/Accounts.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { expectEnvelope } from "./support/envelope.js"
import { importOneHook } from "./support/importedHook.js"
import { servicesRuntime } from "./support/runtime.js"
import {
  type ApiKeyBody,
  type ErrorBody,
  ledgerState,
  type OpenApiDocument,
  startTestServer,
  type TestServer,
  type UsageBody,
  type WalletBody
} from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

interface KeySpendBody {
  readonly object: "key_spend"
  readonly key_id: string
  readonly spend_limit: number | null
  readonly period_spent: number
  readonly period_end: string
}

let server: TestServer
let runtime: ReturnType<typeof servicesRuntime>
let hookId: string

beforeAll(async () => {
  server = await startTestServer(
    { AUTH_CACHE_TTL: "0 millis", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true" },
    { background: false }
  )
  runtime = servicesRuntime(server.databaseUrl)
  hookId = await importOneHook(server, { text: "Budgetwren: the hook a limited key reads", source_url: "https://budgets.example/1" }, "budgetwren")
}, 60_000)
afterAll(async () => {
  await runtime.dispose()
  await server.close()
})

/** An account with `topup` credits and no monthly ones, and a key with `spend_limit` (none when undefined). */
const limitedKey = async (topup: number, spendLimit?: number) => {
  const { accountId } = await server.account({ plan: "pro", monthly_balance: 0, topup_balance: topup })
  const created = await server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, {
    method: "POST",
    body: spendLimit === undefined ? {} : { spend_limit: spendLimit }
  })
  expect(created.status).toBe(200)
  return { accountId, key: created.body.api_key, keyId: created.body.id, created: created.body }
}

const readHook = (key: string) => server.request(`/v1/hooks/${hookId}`, { key })
const currentKey = (key: string) => server.request<KeySpendBody>("/v1/keys/current", { key })

describe("a key's spend limit", () => {
  test("past the limit: 402 spend_limit_reached naming the limit and the period end, nothing charged; a higher limit lets it go on", async () => {
    const { accountId, key, keyId, created } = await limitedKey(100, 3)
    expect(created.spend_limit).toBe(3)
    const wallet = await server.request<WalletBody>("/v1/wallet", { key })
    const periodEnd = wallet.body.monthly_period_end
    expect((await currentKey(key)).body).toEqual({ object: "key_spend", key_id: keyId, spend_limit: 3, period_spent: 0, period_end: periodEnd! })

    for (let i = 0; i < 3; i++) {
      const answer = await readHook(key)
      expect(answer.status).toBe(200)
      expect(answer.headers.get("x-credits-charged")).toBe("1")
    }
    const before = await ledgerState(server.db, accountId)
    const refused = await readHook(key)
    expectEnvelope(refused, 402, "spend_limit_reached")
    expect((refused.body as ErrorBody).error.message).toBe(
      `This request costs 1 credits and would pass this key's spend limit of 3 credits for the period ending ${periodEnd}.`
    )
    expect(refused.headers.get("x-credits-charged")).toBeNull()
    const after = await ledgerState(server.db, accountId)
    expect(after).toEqual(before)
    expect(after.topup).toBe(97)
    expect(after.topup).toBe(after.journalTopup)
    // Reads that cost nothing still answer.
    expect((await server.request("/v1/wallet", { key })).status).toBe(200)
    expect((await currentKey(key)).body).toMatchObject({ spend_limit: 3, period_spent: 3 })

    const raised = await server.admin<KeySpendBody>(`/admin/keys/${keyId}`, { method: "PATCH", body: { spend_limit: 5 } })
    expect(raised.status).toBe(200)
    expect(raised.body).toEqual({ object: "key_spend", key_id: keyId, spend_limit: 5, period_spent: 3, period_end: periodEnd! })
    expect((await readHook(key)).status).toBe(200)
    const removed = await server.admin<KeySpendBody>(`/admin/keys/${keyId}`, { method: "PATCH", body: { spend_limit: null } })
    expect(removed.body).toMatchObject({ spend_limit: null, period_spent: 4 })
  })

  test("a page reserves in full against the limit until it settles; what it did not use comes back to the key", async () => {
    const { key } = await limitedKey(100, 3)
    // Reserves 2, settles 1 for a one-row page: the key spent 1.
    const first = await server.request("/v1/hooks/search?q=budgetwren", { key })
    expect(first.headers.get("x-credits-charged")).toBe("1")
    expect((await currentKey(key)).body.period_spent).toBe(1)
    expect((await server.request("/v1/hooks/search?q=budgetwren", { key })).status).toBe(200)
    // 2 spent: a third page would reserve 2 more (4 > 3), though it would settle for 1.
    expectEnvelope(await server.request("/v1/hooks/search?q=budgetwren", { key }), 402, "spend_limit_reached")
    expect((await currentKey(key)).body.period_spent).toBe(2)
  })

  test("another key of the same account is not limited by it", async () => {
    const { accountId, key } = await limitedKey(100, 0)
    expectEnvelope(await readHook(key), 402, "spend_limit_reached")
    const other = await server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, { method: "POST", body: {} })
    expect(other.body.spend_limit).toBeNull()
    expect((await readHook(other.body.api_key)).status).toBe(200)
  })

  test("a prediction's reserve counts against the key that created it: refused past the limit, nothing charged", async () => {
    const { accountId, key, keyId } = await limitedKey(100, 10)
    const link = await server.request<{ upload_id: string; prediction_id: string }>("/v1/predict/upload", { method: "POST", key })
    expect(link.status).toBe(200)
    // The clip landed while the reserve could not be made: its upload is received, the job still awaits its credits.
    await server.db.query("UPDATE uploads SET status = 'received', received_at = now() WHERE id = $1", [link.body.upload_id])
    const before = await ledgerState(server.db, accountId)
    const refused = await server.request("/v1/predict", { method: "POST", key, body: { upload_id: link.body.upload_id } })
    expectEnvelope(refused, 402, "spend_limit_reached")
    expect((refused.body as ErrorBody).error.message).toContain("reserves 20 credits and would pass this key's spend limit of 10 credits")
    expect(await ledgerState(server.db, accountId)).toEqual(before)
    await server.admin(`/admin/keys/${keyId}`, { method: "PATCH", body: { spend_limit: 30 } })
    const queued = await server.request("/v1/predict", { method: "POST", key, body: { upload_id: link.body.upload_id } })
    expect(queued.status).toBe(200)
    expect(queued.headers.get("x-credits-charged")).toBe("20")
    expect((await currentKey(key)).body).toMatchObject({ spend_limit: 30, period_spent: 20 })
  })

  test("a short wallet within the limit is still insufficient_credits", async () => {
    const { key } = await limitedKey(0, 10)
    expectEnvelope(await readHook(key), 402, "insufficient_credits")
  })

  test("PATCH /admin/keys/{id}: an unknown key is 404; a negative, fractional or missing limit or another field is 422; nothing changes", async () => {
    const { keyId } = await limitedKey(10, 7)
    expectEnvelope(await server.admin(`/admin/keys/key_unknown`, { method: "PATCH", body: { spend_limit: 1 } }), 404, "not_found")
    for (const body of [{ spend_limit: -1 }, { spend_limit: 1.5 }, {}, { spend_limit: 1, scopes: [] }, { spend_limit: "1" }]) {
      expectEnvelope(await server.admin(`/admin/keys/${keyId}`, { method: "PATCH", body }), 422, "validation_error")
    }
    expectEnvelope(await server.admin(`/admin/accounts/nope/keys`, { method: "POST", body: { spend_limit: 1 } }), 404, "not_found")
    const { rows } = await server.db.query("SELECT spend_limit::int FROM api_keys WHERE id = $1", [keyId])
    expect(rows[0].spend_limit).toBe(7)
    expectEnvelope(await server.request("/v1/keys/current"), 401, "invalid_api_key")
  })

  test("key.spend_limit_reached is written once per period, with the key's budget", async () => {
    const { accountId, key, keyId } = await limitedKey(100, 1)
    const put = await server.request("/v1/webhooks", { method: "PUT", key, body: { url: "http://127.0.0.1:9/hooks" } })
    expect(put.status).toBe(200)
    expect((await readHook(key)).status).toBe(200)
    expectEnvelope(await readHook(key), 402, "spend_limit_reached")
    expectEnvelope(await readHook(key), 402, "spend_limit_reached")
    const { rows } = await server.db.query<{ body: string }>(
      "SELECT body FROM webhook_deliveries WHERE account_id = $1 AND event_type = 'key.spend_limit_reached'",
      [accountId]
    )
    expect(rows.length).toBe(1)
    const periodEnd = (await currentKey(key)).body.period_end
    expect(JSON.parse(rows[0].body)).toMatchObject({
      object: "event",
      type: "key.spend_limit_reached",
      data: { object: "key_budget", key_id: keyId, spend_limit: 1, period_spent: 1, period_end: periodEnd }
    })
  })

  test("usage by key: each key's spend, grants under none", async () => {
    const { accountId, key, keyId } = await limitedKey(50)
    const other = await server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, { method: "POST", body: {} })
    await readHook(key)
    await readHook(key)
    await server.request("/v1/hooks/search?q=budgetwren", { key: other.body.api_key })
    const usage = await server.request<UsageBody>("/v1/wallet/usage?group_by=key", { key })
    expect(usage.status).toBe(200)
    expect(usage.body.group_by).toBe("key")
    const byKey = Object.fromEntries(usage.body.data.map((row) => [row.key, row]))
    expect(byKey[keyId]).toMatchObject({ spent: 2, granted: 0, net: -2 })
    expect(byKey[other.body.id]).toMatchObject({ spent: 1, net: -1 })
    expect(byKey["none"]).toMatchObject({ granted: 50, spent: 0 })
    const admin = await server.admin<UsageBody>(`/admin/accounts/${accountId}/usage?group_by=key`)
    expect(admin.body.data).toEqual(usage.body.data)
  })

  test("the new routes and the 402 are in /openapi.json", async () => {
    const spec = await server.request<OpenApiDocument>("/openapi.json")
    expect(spec.body.paths["/v1/keys/current"]?.get).toBeDefined()
    expect(spec.body.paths["/admin/keys/{id}"]?.patch).toBeDefined()
    expect(JSON.stringify(spec.body.paths["/v1/hooks/{id}"])).toContain("Error_spend_limit_reached")
  })
})

describe("races", () => {
  test("30 concurrent reads on a key limited to 10: exactly 10 answered and charged, 20 refused", async () => {
    const { accountId, key } = await limitedKey(100, 10)
    const answers = await Promise.all(Array.from({ length: 30 }, () => readHook(key)))
    expect(answers.filter((answer) => answer.status === 200).length).toBe(10)
    for (const refused of answers.filter((answer) => answer.status !== 200)) expectEnvelope(refused, 402, "spend_limit_reached")
    const charged = answers.reduce((total, answer) => total + Number(answer.headers.get("x-credits-charged") ?? 0), 0)
    const state = await ledgerState(server.db, accountId)
    expect(charged).toBe(10)
    expect(state.topup).toBe(90)
    expect(state.topup).toBe(state.journalTopup)
  })

  test("100 concurrent reserves of 3 on a key limited to 50: exactly 16 pass; settles and refunds give back exactly", async () => {
    const { accountId, keyId } = await limitedKey(1_000, 50)
    const reserve = runtime.runPromise(Effect.flatMap(Ledger, (ledger) =>
      Effect.forEach(
        Array.from({ length: 100 }, () => ledger.reserve(accountId, 3, { operation: "search", keyId }).pipe(Effect.result)),
        (attempt) => attempt,
        { concurrency: "unbounded" }
      )))
    const results = await reserve
    const holds = results.filter(Result.isSuccess).map((result) => result.success)
    expect(holds.length).toBe(16)
    expect(results.filter(Result.isFailure).every((result) => result.failure._tag === "SpendLimitReached")).toBe(true)
    const spent = async () => Number((await server.db.query("SELECT period_spent FROM api_keys WHERE id = $1", [keyId])).rows[0].period_spent)
    expect(await spent()).toBe(48)
    // Settle half for 1, refund the others, concurrently.
    await runtime.runPromise(Effect.flatMap(Ledger, (ledger) =>
      Effect.forEach(holds, (hold, i) => (i % 2 === 0 ? ledger.settle(hold.id, 1) : ledger.refund(hold.id)), { concurrency: "unbounded" })))
    expect(await spent()).toBe(8)
    const { rows } = await server.db.query("SELECT COALESCE(-sum(amount), 0)::int AS net FROM credit_journal WHERE key_id = $1", [keyId])
    expect(rows[0].net).toBe(8)
    const state = await ledgerState(server.db, accountId)
    expect(state.topup).toBe(1_000 - 8)
    expect(state.topup).toBe(state.journalTopup)
    expect(state.pendingHolds).toBe(0)
  })

  test("two keys of one short wallet racing: neither passes its limit and the wallet never goes below zero", async () => {
    const { accountId, keyId } = await limitedKey(50, 30)
    const second = await runtime.runPromise(Effect.flatMap(Accounts, (accounts) => accounts.createKey(accountId, undefined, 30)))
    const results = await runtime.runPromise(Effect.flatMap(Ledger, (ledger) =>
      Effect.forEach(
        Array.from({ length: 60 }, (_, i) => ledger.charge(accountId, 1, { operation: "hook", keyId: i % 2 === 0 ? keyId : second.id })),
        (attempt) => Effect.result(attempt),
        { concurrency: "unbounded" }
      )))
    expect(results.filter(Result.isSuccess).length).toBe(50)
    const { rows } = await server.db.query<{ id: string; period_spent: string }>(
      "SELECT id, period_spent FROM api_keys WHERE id = ANY($1)",
      [[keyId, second.id]]
    )
    for (const row of rows) expect(Number(row.period_spent)).toBeLessThanOrEqual(30)
    expect(rows.reduce((total, row) => total + Number(row.period_spent), 0)).toBe(50)
    const state = await ledgerState(server.db, accountId)
    expect(state.topup).toBe(0)
    expect(state.topup).toBe(state.journalTopup)
  })
})

describe("the admin CLI", () => {
  test("keys create --spend-limit and keys update --spend-limit N|none", async () => {
    const { accountId } = await server.account({ plan: "pro" })
    const dataDir = tempDir("hookline-cli-")
    try {
      const cli = (...args: Array<string>) => {
        const run = Bun.spawnSync([process.execPath, "src/Admin/Cli.ts", ...args], {
          cwd: join(import.meta.dir, ".."),
          env: { ...process.env, DATABASE_URL: server.databaseUrl, DATA_DIR: dataDir, LOG_LEVEL: "Warning" }
        })
        if (run.exitCode !== 0) throw new Error(run.stderr.toString())
        return JSON.parse(run.stdout.toString()) as Record<string, unknown>
      }
      const created = cli("keys", "create", accountId, "--spend-limit", "25")
      expect(created).toMatchObject({ object: "api_key", spend_limit: 25 })
      expect(cli("keys", "update", String(created.id), "--spend-limit", "40")).toMatchObject({ spend_limit: 40, period_spent: 0 })
      expect(cli("keys", "update", String(created.id), "--spend-limit", "none")).toMatchObject({ spend_limit: null })
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, 60_000)
})
