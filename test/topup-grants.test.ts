/**
 * Expiring top-up grants over HTTP: the admin grant's expires_at (422 in the past or on a monthly
 * grant), GET /v1/wallet/grants in spending order, a metered request taking the soonest-expiring
 * grant first, and an expired grant leaving the wallet through an expiry in the credit history
 * and the usage summary, with every balance equal to its journal. The route is in the OpenAPI
 * document. (The rules themselves, on both repositories: test/ledger-contract.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { expectEnvelope } from "./support/envelope.js"
import { importOneHook } from "./support/importedHook.js"
import { ledgerState, type OpenApiDocument, startTestServer, type TestServer, type WalletBody } from "./support/server.js"

interface GrantListBody {
  readonly object: "list"
  readonly data: ReadonlyArray<{
    readonly object: "topup_grant"
    readonly id: string
    readonly amount: number
    readonly remaining: number
    readonly expires_at: string | null
    readonly created_at: string
  }>
  readonly has_more: boolean
  readonly next_cursor: null
}

interface TransactionListBody {
  readonly data: ReadonlyArray<{
    readonly type: string
    readonly bucket: string
    readonly amount: number
    readonly reference: { readonly kind: string; readonly id: string | null }
    readonly reason: string | null
  }>
}

let server: TestServer
let hookId: string

beforeAll(async () => {
  server = await startTestServer({ AUTH_CACHE_TTL: "0 millis" }, { background: false })
  hookId = await importOneHook(server, { text: "Grantfinch: the hook an expiring grant pays for", source_url: "https://grants.example/1" }, "grantfinch")
}, 60_000)
afterAll(async () => {
  await server.close()
})

const inDays = (days: number) => new Date(Date.now() + days * 24 * 60 * 60 * 1000).toISOString()

const grant = (accountId: string, body: Record<string, unknown>) =>
  server.admin<WalletBody>(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", ...body } })

describe("expiring top-up grants over HTTP", () => {
  test("expires_at must be in the future and only on a top-up grant: 422 in the envelope, nothing granted", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 0 })
    expectEnvelope(await grant(accountId, { amount: 5, expires_at: inDays(-1) }), 422, "validation_error")
    expectEnvelope(await grant(accountId, { bucket: "monthly", amount: 5, expires_at: inDays(1) }), 422, "validation_error")
    expectEnvelope(await grant(accountId, { amount: 5, expires_at: "tomorrow" }), 422, "validation_error")
    const wallet = await server.request<WalletBody>("/v1/wallet", { key })
    expect(wallet.body.topup_balance).toBe(0)
  })

  test("the live grants in spending order; a request takes the soonest-expiring first; an expired grant leaves through an expiry", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 0 })
    expect((await grant(accountId, { amount: 50, reference: "inv_never" })).status).toBe(200)
    const late = await grant(accountId, { amount: 30, expires_at: inDays(30) })
    expect(late.body.topup_balance).toBe(80)
    expect((await grant(accountId, { amount: 20, expires_at: inDays(2) })).status).toBe(200)

    const listed = await server.request<GrantListBody>("/v1/wallet/grants", { key })
    expect(listed.status).toBe(200)
    expect(listed.headers.get("x-credits-charged")).toBeNull()
    expect(listed.body.data.map((item) => [item.amount, item.remaining, item.expires_at === null])).toEqual([
      [20, 20, false],
      [30, 30, false],
      [50, 50, true]
    ])
    expect(listed.body).toMatchObject({ object: "list", has_more: false, next_cursor: null })

    // Six single-hook reads (1 credit each, no monthly credits): all six from the soonest-expiring grant.
    for (let i = 0; i < 6; i++) expect((await server.request(`/v1/hooks/${hookId}`, { key })).status).toBe(200)
    const spent = await server.request<GrantListBody>("/v1/wallet/grants", { key })
    expect(spent.body.data.map((item) => item.remaining)).toEqual([14, 30, 50])
    const soon = listed.body.data[0]
    // The soonest grant's expiry comes: moved into the past on its row and the wallet's, as time would.
    await server.db.query("UPDATE topup_grants SET expires_at = now() - interval '1 second' WHERE id = $1", [soon.id])
    await server.db.query("UPDATE wallets SET next_grant_expiry = now() - interval '1 second' WHERE account_id = $1", [accountId])

    const wallet = await server.request<WalletBody>("/v1/wallet", { key })
    expect(wallet.body.topup_balance).toBe(80)
    const after = await server.request<GrantListBody>("/v1/wallet/grants", { key })
    expect(after.body.data.map((item) => item.remaining)).toEqual([30, 50])
    const history = await server.request<TransactionListBody>("/v1/wallet/transactions?type=expiry", { key })
    expect(history.body.data).toEqual([
      { ...history.body.data[0], type: "expiry", bucket: "topup", amount: -14, reference: { kind: "admin", id: soon.id }, reason: "top-up grant expired" }
    ])
    const state = await ledgerState(server.db, accountId)
    expect({ monthly: state.monthly, topup: state.topup }).toEqual({ monthly: state.journalMonthly, topup: state.journalTopup })
  })

  test("GET /v1/wallet/grants is in the OpenAPI document", async () => {
    const document = await server.request<OpenApiDocument>("/openapi.json")
    expect(Object.keys(document.body.paths["/v1/wallet/grants"] ?? {})).toEqual(["get"])
    expect(document.body.components.schemas.TopupGrant?.properties).toHaveProperty("expires_at")
    expect(document.body.components.schemas.GrantCredits?.properties).toHaveProperty("expires_at")
  })
})
