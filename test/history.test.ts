/**
 * The credit history over real HTTP. Besides real searches and gets, holds are driven through the
 * Ledger service on the same database, exactly as the metered routes and the prediction jobs drive
 * them (reserve → settle, refund), with the request ids those requests would carry, so every case
 * (a two-bucket charge, a prediction refund, a pending hold) is reached on purpose.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { SqlClient } from "effect/sql"
import { Effect, Option, Result } from "effect"
import { historyPage } from "../src/Ledger/HistoryRepo.js"
import { type Operation, Ledger } from "../src/Ledger/Ledger.js"
import { expectEnvelope } from "./support/envelope.js"
import { servicesRuntime } from "./support/runtime.js"
import {
  type ErrorBody,
  type HookPage,
  ledgerState,
  startTestServer,
  type TestServer,
  type TransactionBody,
  type TransactionPage,
  type UsageBody,
  type WalletBody
} from "./support/server.js"

let server: TestServer
let runtime: ReturnType<typeof servicesRuntime>

beforeAll(async () => {
  server = await startTestServer()
  runtime = servicesRuntime(server.databaseUrl)
})
afterAll(async () => {
  await runtime.dispose()
  await server.close()
})

let requestCounter = 0
const requestId = () => `req_history_${++requestCounter}`

const reserve = (accountId: string, amount: number, options: { operation: Operation; requestId: string; referenceId?: string }) =>
  runtime.runPromise(Effect.flatMap(Ledger, (ledger) =>
    ledger.reserve(accountId, amount, {
      operation: options.operation,
      requestId: options.requestId,
      referenceId: options.referenceId ?? null,
      expires: options.operation !== "prediction"
    }).pipe(Effect.result))).then((result) => {
    if (Result.isFailure(result)) throw new Error("reserve failed")
    return result.success
  })

const settle = (holdId: string, amount: number) =>
  runtime.runPromise(Effect.flatMap(Ledger, (ledger) => ledger.settle(holdId, amount))).then(Option.getOrThrow)

const refund = (holdId: string) =>
  runtime.runPromise(Effect.flatMap(Ledger, (ledger) => ledger.refund(holdId))).then(Option.getOrThrow)

/** A metered request: reserve, then settle what the answer cost (X-Credits-Charged). */
const meteredRequest = async (
  accountId: string,
  operation: Operation,
  reserved: number,
  charged: number,
  referenceId?: string
) => {
  const id = requestId()
  const hold = await reserve(accountId, reserved, { operation, requestId: id, referenceId })
  const resolution = await settle(hold.id, charged)
  return { requestId: id, charged: resolution.charged, remaining: resolution.balancesAfter }
}

const history = (key: string, query = "") => server.request<TransactionPage>(`/v1/wallet/transactions${query}`, { key })

/** Every page, following next_cursor. */
const allPages = async (path: string, bearer: { key?: string }, limit: number) => {
  const items: Array<TransactionBody> = []
  let cursor: string | null = null
  do {
    const separator = path.includes("?") ? "&" : "?"
    const url: string = `${path}${separator}limit=${limit}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`
    const page: Awaited<ReturnType<typeof server.request<TransactionPage>>> = bearer.key === undefined
      ? await server.admin<TransactionPage>(url)
      : await server.request<TransactionPage>(url, { key: bearer.key })
    expect(page.status).toBe(200)
    expect(page.body.data.length).toBeLessThanOrEqual(limit)
    items.push(...page.body.data)
    cursor = page.body.next_cursor
    expect(page.body.has_more).toBe(cursor !== null)
  } while (cursor !== null)
  return items
}

/** Oldest first, each row's balance_after is the previous one plus its amount. */
const expectChained = (newestFirst: ReadonlyArray<TransactionBody>) => {
  const balance = { monthly: 0, topup: 0 }
  for (const item of [...newestFirst].reverse()) {
    balance[item.bucket] += item.amount
    expect(item.balance_after).toEqual(balance)
  }
  return balance
}

const strip = (item: TransactionBody) => ({
  type: item.type,
  bucket: item.bucket,
  amount: item.amount,
  balance_after: item.balance_after,
  request_id: item.request_id,
  reference: item.reference
})

describe("the credit history", () => {
  test("a mixed sequence lists each change once, with its type, bucket, amount and balances after", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    const wallet = async () => (await server.request<WalletBody>("/v1/wallet", { key })).body

    const topUp = await server.admin(`/admin/accounts/${accountId}/credits`, {
      method: "POST",
      body: { bucket: "topup", amount: 500, reference: "inv_2026_11", reason: "November invoice" }
    })
    expect(topUp.status).toBe(200)
    const fullPage = await meteredRequest(accountId, "search", 2, 2)
    const partialPage = await meteredRequest(accountId, "list", 2, 1)
    const emptyPage = await meteredRequest(accountId, "search", 2, 0)
    const hookGet = await meteredRequest(accountId, "hook", 1, 1, "hook_0123456789abcdef0123456789abcdef")
    // A failed search: its hold is refunded by the metering, nothing was charged.
    const failedRequest = requestId()
    const failed = await reserve(accountId, 2, { operation: "search", requestId: failedRequest })
    await refund(failed.id)

    const goodPrediction = requestId()
    const good = await reserve(accountId, 20, { operation: "prediction", requestId: goodPrediction, referenceId: "pred_good" })
    await settle(good.id, 20)
    const badPrediction = requestId()
    const bad = await reserve(accountId, 20, { operation: "prediction", requestId: badPrediction, referenceId: "pred_bad" })
    await refund(bad.id)

    // The monthly period ends: 1000 - 2 - 1 - 1 - 20 = 976 unused monthly credits expire, 1000 are granted.
    await server.db.query("UPDATE wallets SET monthly_period_end = now() - interval '1 minute' WHERE account_id = $1", [accountId])

    const response = await history(key)
    expect(response.status).toBe(200)
    expect(response.headers.get("x-credits-charged")).toBeNull()
    const page = response.body
    expect(page.object).toBe("list")
    expect(page.has_more).toBe(false)
    expect(page.next_cursor).toBeNull()
    // `reason` says why a grant or expiry happened: the admin's reason, or the ledger's own.
    expect(page.data.map((item) => ({ ...strip(item), reason: item.reason }))).toEqual([
      { type: "grant", bucket: "monthly", amount: 1000, balance_after: { monthly: 1000, topup: 500 }, request_id: null, reference: { kind: "rollover", id: null }, reason: "monthly grant" },
      { type: "expiry", bucket: "monthly", amount: -976, balance_after: { monthly: 0, topup: 500 }, request_id: null, reference: { kind: "rollover", id: null }, reason: "monthly period ended" },
      { type: "refund", bucket: "monthly", amount: 20, balance_after: { monthly: 976, topup: 500 }, request_id: badPrediction, reference: { kind: "prediction", id: "pred_bad" }, reason: null },
      { type: "charge", bucket: "monthly", amount: -20, balance_after: { monthly: 956, topup: 500 }, request_id: badPrediction, reference: { kind: "prediction", id: "pred_bad" }, reason: null },
      { type: "charge", bucket: "monthly", amount: -20, balance_after: { monthly: 976, topup: 500 }, request_id: goodPrediction, reference: { kind: "prediction", id: "pred_good" }, reason: null },
      { type: "charge", bucket: "monthly", amount: -1, balance_after: hookGet.remaining, request_id: hookGet.requestId, reference: { kind: "hook", id: "hook_0123456789abcdef0123456789abcdef" }, reason: null },
      { type: "charge", bucket: "monthly", amount: -1, balance_after: partialPage.remaining, request_id: partialPage.requestId, reference: { kind: "list", id: null }, reason: null },
      { type: "charge", bucket: "monthly", amount: -2, balance_after: fullPage.remaining, request_id: fullPage.requestId, reference: { kind: "search", id: null }, reason: null },
      { type: "grant", bucket: "topup", amount: 500, balance_after: { monthly: 1000, topup: 500 }, request_id: topUp.headers.get("x-request-id"), reference: { kind: "admin", id: "inv_2026_11" }, reason: "November invoice" },
      { type: "grant", bucket: "monthly", amount: 1000, balance_after: { monthly: 1000, topup: 0 }, request_id: null, reference: { kind: "admin", id: null }, reason: "opening balance" }
    ])
    // The empty page and the failed search changed nothing and are not listed.
    expect(page.data.some((item) => item.request_id === emptyPage.requestId || item.request_id === failedRequest)).toBe(false)
    expect(emptyPage.charged).toBe(0)

    // Each charge's amounts add up to what its request reported as X-Credits-Charged.
    for (const request of [fullPage, partialPage, hookGet]) {
      const sum = page.data.filter((item) => item.request_id === request.requestId).reduce((total, item) => total + item.amount, 0)
      expect(-sum).toBe(request.charged)
    }
    // The amounts sum to the balances, and every balance_after chains from the one before.
    const final = expectChained(page.data)
    const now = await wallet()
    expect(final).toEqual({ monthly: now.monthly_balance, topup: now.topup_balance })
    const state = await ledgerState(server.db, accountId)
    expect(final).toEqual({ monthly: state.journalMonthly, topup: state.journalTopup })

    for (const item of page.data) {
      expect(item.object).toBe("credit_transaction")
      expect(item.id).toMatch(/^txn_[0-9a-f]{32}$/)
      expect(item.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    }
    expect(new Set(page.data.map((item) => item.id)).size).toBe(page.data.length)
    const times = page.data.map((item) => Date.parse(item.created_at))
    expect([...times].sort((a, b) => b - a)).toEqual(times)

    // The admin view of the same account is the same list.
    const admin = await server.admin<TransactionPage>(`/admin/accounts/${accountId}/transactions`)
    expect(admin.status).toBe(200)
    expect(admin.body.data).toEqual(page.data)
  })

  test("real metered requests: each search and get is one charge carrying its X-Request-Id and X-Credits-Charged", async () => {
    // 60 hooks with a word of their own: a full page of 50 (2 credits), then a partial page of 10 (1 credit).
    const word = `quillmarsh${requestCounter}`
    const hooks = Array.from({ length: 60 }, (_, i) =>
      JSON.stringify({ text: `${word} hook number ${i}`, platform: "tiktok", source_url: `https://tiktok.example/${word}/${i}` }))
    const imported = await server.admin("/admin/catalog/hooks", {
      method: "POST",
      rawBody: hooks.join("\n"),
      headers: { "content-type": "application/x-ndjson" }
    })
    expect(imported.status).toBe(200)
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    const before = await ledgerState(server.db, accountId)

    const full = await server.request<HookPage>(`/v1/hooks/search?q=${word}`, { key })
    const partial = await server.request<HookPage>(`/v1/hooks/search?q=${word}&cursor=${encodeURIComponent(full.body.next_cursor ?? "")}`, { key })
    const empty = await server.request<HookPage>("/v1/hooks/search?q=zzyzxnothingmatches", { key })
    const get = await server.request(`/v1/hooks/${full.body.data[0].id}`, { key })
    expect([full.status, partial.status, empty.status, get.status]).toEqual([200, 200, 200, 200])
    expect([full.body.data.length, partial.body.data.length, empty.body.data.length]).toEqual([50, 10, 0])
    const requests = [full, partial, empty, get]
    for (const response of requests) expect(response.status).toBe(200)
    expect(requests.map((response) => response.headers.get("x-credits-charged"))).toEqual(["2", "1", "0", "1"])

    const charges = (await history(key, "?type=charge")).body.data
    expect(charges.map((item) => [item.request_id, item.amount, item.reference.kind])).toEqual([
      [get.headers.get("x-request-id"), -1, "hook"],
      [partial.headers.get("x-request-id"), -1, "search"],
      [full.headers.get("x-request-id"), -2, "search"]
    ])
    expect(charges[0].reference.id).toBe(full.body.data[0].id)
    // balance_after is what the request reported as X-Credits-Remaining.
    for (const [item, response] of [[charges[0], get], [charges[1], partial], [charges[2], full]] as const) {
      expect(response.headers.get("x-credits-remaining")).toBe(String(item.balance_after.monthly + item.balance_after.topup))
    }
    const charged = requests.reduce((sum, response) => sum + Number(response.headers.get("x-credits-charged")), 0)
    const after = await ledgerState(server.db, accountId)
    expect(charges.reduce((sum, item) => sum + item.amount, 0)).toBe(-charged)
    expect(after.monthly + after.topup - before.monthly - before.topup).toBe(-charged)
  })

  test("a charge taken from both buckets is one row per bucket, at the settle, summing to X-Credits-Charged", async () => {
    const { accountId, key } = await server.account({ plan: "custom", monthly_grant: 1000, monthly_balance: 1, topup_balance: 10 })
    // Reserves 1 monthly + 2 top-up, settles 2: takes the monthly credit and one top-up credit.
    const request = await meteredRequest(accountId, "search", 3, 2)
    expect(request.remaining).toEqual({ monthly: 0, topup: 9 })
    const page = (await history(key, "?type=charge")).body
    expect(page.data.map(strip)).toEqual([
      { type: "charge", bucket: "topup", amount: -1, balance_after: { monthly: 0, topup: 9 }, request_id: request.requestId, reference: { kind: "search", id: null } },
      { type: "charge", bucket: "monthly", amount: -1, balance_after: { monthly: 0, topup: 9 }, request_id: request.requestId, reference: { kind: "search", id: null } }
    ])
    expect(page.data[0].id).not.toBe(page.data[1].id)
  })

  test("a request still in flight is not listed until its hold settles", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    const id = requestId()
    const hold = await reserve(accountId, 2, { operation: "search", requestId: id })
    expect((await history(key, "?type=charge")).body.data).toEqual([])
    await settle(hold.id, 1)
    const charges = (await history(key, "?type=charge")).body.data
    expect(charges.map(strip)).toEqual([
      { type: "charge", bucket: "monthly", amount: -1, balance_after: { monthly: 999, topup: 0 }, request_id: id, reference: { kind: "search", id: null } }
    ])
  })

  test("pages cover every row exactly once while new charges arrive", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 100 })
    for (let i = 0; i < 23; i++) await meteredRequest(accountId, i % 2 === 0 ? "search" : "hook", 2, 1 + (i % 2))
    const before = (await history(key, "?limit=100")).body.data
    expect(before).toHaveLength(25)

    const seen: Array<TransactionBody> = []
    let cursor: string | null = null
    let pages = 0
    do {
      const page: TransactionPage = (await history(key, `?limit=4${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`)).body
      seen.push(...page.data)
      cursor = page.next_cursor
      pages++
      // New activity between pages: lands before the first page, never inside the walk.
      await meteredRequest(accountId, "search", 2, 2)
      await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 1 } })
    } while (cursor !== null)
    expect(pages).toBe(7)
    expect(seen.map((item) => item.id)).toEqual(before.map((item) => item.id))

    const after = (await history(key, "?limit=100")).body.data
    expect(after).toHaveLength(25 + pages * 2)
    expect(after.slice(pages * 2)).toEqual([...before])
    expectChained(after)
  })

  test("limit defaults to 50 and pages through every row", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    for (let i = 0; i < 60; i++) await meteredRequest(accountId, "search", 1, 1)
    const first = await history(key)
    expect(first.body.data).toHaveLength(50)
    expect(first.body.has_more).toBe(true)
    const everything = await allPages("/v1/wallet/transactions", { key }, 100)
    expect(everything).toHaveLength(61)
    expect((await allPages(`/admin/accounts/${accountId}/transactions`, {}, 13)).map((item) => item.id))
      .toEqual(everything.map((item) => item.id))
  })

  test("filters: type and a created range", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    await meteredRequest(accountId, "search", 2, 2)
    await server.db.query("UPDATE holds SET resolved_at = '2026-01-10T12:00:00Z' WHERE account_id = $1", [accountId])
    await server.db.query("UPDATE credit_journal SET created_at = '2026-01-01T00:00:00Z' WHERE account_id = $1 AND hold_id IS NULL", [accountId])
    await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 5 } })

    expect((await history(key, "?type=grant")).body.data.map((item) => item.amount)).toEqual([5, 1000])
    expect((await history(key, "?type=expiry")).body.data).toEqual([])
    const january = (await history(key, "?created[gte]=2026-01-05&created[lte]=2026-01-31T23:59:59Z")).body.data
    expect(january.map((item) => [item.type, item.amount])).toEqual([["charge", -2]])
    expect(january[0].created_at).toBe("2026-01-10T12:00:00.000Z")
    const encoded = (await history(key, "?created%5Blte%5D=2026-01-10T12:00:00.000Z")).body.data
    expect(encoded.map((item) => item.amount)).toEqual([-2, 1000])
  })

  test("a cursor works only with the query and endpoint that made it", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    for (let i = 0; i < 3; i++) await meteredRequest(accountId, "search", 1, 1)
    const first = (await history(key, "?limit=1&type=charge")).body
    const cursor = encodeURIComponent(first.next_cursor ?? "")
    expect((await history(key, `?limit=2&type=charge&cursor=${cursor}`)).status).toBe(200)

    const expectInvalid = (response: { status: number; body: unknown }) => {
      expect(response.status).toBe(400)
      expect((response.body as ErrorBody).error.type).toBe("invalid_cursor")
    }
    expectInvalid(await history(key, `?limit=1&cursor=${cursor}`))
    expectInvalid(await history(key, `?limit=1&type=grant&cursor=${cursor}`))
    expectInvalid(await server.admin(`/admin/accounts/${accountId}/transactions?type=charge&cursor=${cursor}`))
    const altered = first.next_cursor!.replace(/^./, (c) => (c === "e" ? "f" : "e"))
    expectInvalid(await history(key, `?type=charge&cursor=${encodeURIComponent(altered)}`))
    expectInvalid(await history(key, "?cursor=not-a-cursor"))

    // Another account cannot page with this account's cursor.
    const other = await server.account({ plan: "pro" })
    expectInvalid(await history(other.key, `?limit=1&type=charge&cursor=${cursor}`))
  })

  test.each([
    ["limit=0", "limit"],
    ["limit=101", "limit"],
    ["limit=ten", "limit"],
    ["type=topup", "type"],
    ["created[gte]=yesterday", "created[gte]"],
    ["created[lte]=2026-13-45T00:00:00Z", "created[lte]"],
    ["created[gte]=2026-02-30", "created[gte]"],
    ["created[lte]=2026-02-29T00:00:00Z", "created[lte]"],
    ["created[gte]=2026-04-31T10:00:00%2B02:00", "created[gte]"],
    ["created[lte]=2026-11-22T24:00:00Z", "created[lte]"],
    ["sort=asc", "sort"]
  ])("%s is 422 naming %s", async (query, naming) => {
    const { key } = await server.account({ plan: "pro" })
    const response = await history(key, `?${query}`)
    expect(response.status).toBe(422)
    const body: unknown = response.body
    expect((body as ErrorBody).error.type).toBe("validation_error")
    expect((body as ErrorBody).error.message).toContain(naming)
  })

  test("another account's history is never visible", async () => {
    const mine = await server.account({ plan: "pro", topup_balance: 0 })
    const theirs = await server.account({ plan: "pro", topup_balance: 0 })
    await meteredRequest(theirs.accountId, "search", 2, 2)
    await server.admin(`/admin/accounts/${theirs.accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 9 } })
    const page = (await history(mine.key)).body.data
    expect(page.map(strip)).toEqual([
      { type: "grant", bucket: "monthly", amount: 1000, balance_after: { monthly: 1000, topup: 0 }, request_id: null, reference: { kind: "admin", id: null } }
    ])
    const theirIds = new Set((await history(theirs.key)).body.data.map((item) => item.id))
    expect(theirIds.size).toBe(3)
    expect(page.some((item) => theirIds.has(item.id))).toBe(false)
  })

  test("it needs a valid key, costs nothing, and stays available after plan loss", async () => {
    expect((await server.request("/v1/wallet/transactions")).status).toBe(401)
    const { accountId, key } = await server.account({ plan: "pro", scopes: ["hooks:read"] })
    const downgraded = await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { plan: "free" } })
    expect(downgraded.status).toBe(200)
    const before = await ledgerState(server.db, accountId)
    const response = await history(key)
    expect(response.status).toBe(200)
    expect(response.body.data.map((item) => [item.type, item.amount])).toEqual([["expiry", -1000], ["grant", 1000]])
    expect(await ledgerState(server.db, accountId)).toEqual(before)
    // Another /v1 route is closed without API access.
    expect((await server.request("/v1/hooks/categories", { key })).status).toBe(403)
  })

  test("the admin view of an unknown account is 404", async () => {
    const response = await server.admin("/admin/accounts/acct_00000000000000000000000000000000/transactions")
    expect(response.status).toBe(404)
    expect((response.body as ErrorBody).error.type).toBe("not_found")
  })
})

const usage = (key: string, query = "") => server.request<UsageBody>(`/v1/wallet/usage${query}`, { key })

/** The journal's own sum over [from, to), the figure usage totals.net must equal. */
const journalSum = async (accountId: string, from: string, to: string) => {
  const { rows } = await server.db.query(
    "SELECT COALESCE(sum(amount), 0) AS total FROM credit_journal WHERE account_id = $1 AND created_at >= $2 AND created_at < $3",
    [accountId, from, to]
  )
  return Number(rows[0].total)
}

describe("free journal growth", () => {
  interface PlanNode {
    readonly "Relation Name"?: string
    readonly "Actual Rows": number
    readonly "Actual Loops": number
    readonly "Rows Removed by Filter"?: number
    readonly Plans?: ReadonlyArray<PlanNode>
  }
  /** Rows the plan read from each table (returned plus filtered out, times loops). */
  const rowsRead = (node: PlanNode, into: Record<string, number> = {}) => {
    const table = node["Relation Name"]
    if (table !== undefined) {
      into[table] = (into[table] ?? 0) + (node["Actual Rows"] + (node["Rows Removed by Filter"] ?? 0)) * node["Actual Loops"]
    }
    for (const child of node.Plans ?? []) rowsRead(child, into)
    return into
  }

  test("1,000 empty searches are listed nowhere and a history page does not walk their rows", async () => {
    const { accountId, key } = await server.account({ plan: "pro", topup_balance: 0 })
    const charged = await meteredRequest(accountId, "search", 2, 1)
    const empty = Array.from({ length: 1_000 }, (_, i) => `/v1/hooks/search?q=zzyzxemptysearch${i}`)
    for (let from = 0; from < empty.length; from += 20) {
      const answers = await Promise.all(empty.slice(from, from + 20).map((path) => server.request<HookPage>(path, { key })))
      for (const answer of answers) {
        expect(answer.status).toBe(200)
        expect(answer.body.data).toEqual([])
        expect(answer.headers.get("x-credits-charged")).toBe("0")
      }
    }
    const { rows: [counts] } = await server.db.query<{ journal: number; holds: number }>(
      `SELECT (SELECT count(*) FROM credit_journal WHERE account_id = $1)::int AS journal,
              (SELECT count(*) FROM holds WHERE account_id = $1)::int AS holds`,
      [accountId]
    )
    // Each empty search is still a hold, reserved and released (two-phase metering), in the journal.
    expect(counts.holds).toBe(1_001)
    expect(counts.journal).toBeGreaterThanOrEqual(2_000)

    const page = await history(key)
    expect(page.status).toBe(200)
    expect(page.body.data.map((item) => [item.type, item.amount, item.request_id])).toEqual([
      ["charge", -1, charged.requestId],
      ["grant", 1_000, null]
    ])
    expect(page.body.has_more).toBe(false)

    // What a page costs the database: rows read from the journal and the holds.
    const plan = await runtime.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [text, params] = historyPage(sql, accountId, {}, Option.none(), 50).compile()
      return yield* sql.unsafe<{ "QUERY PLAN": ReadonlyArray<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params)
    }))
    const read = rowsRead(plan[0]["QUERY PLAN"][0].Plan)
    console.log(`history page after 1,000 empty searches: ${counts.journal} journal rows, ${counts.holds} holds; rows read: ${JSON.stringify(read)}`)
    expect(read.credit_journal ?? 0).toBeLessThan(20)
    expect(read.holds ?? 0).toBeLessThan(20)
    expect(await ledgerState(server.db, accountId)).toMatchObject({ monthly: 999, journalMonthly: 999, pendingHolds: 0 })
  }, 120_000)
})

describe("usage summary", () => {
  test("with no range it covers the last 30 days up to now; with only `to`, the 30 days before it", async () => {
    const { accountId, key } = await server.account({ plan: "pro" })
    for (const amount of [29, 31]) {
      await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount } })
      // Each grant dated that many days ago (less a minute, so the range's start is not on it).
      await server.db.query(
        `UPDATE credit_journal SET created_at = now() - make_interval(days => $2) + interval '1 minute'
          WHERE seq = (SELECT max(seq) FROM credit_journal WHERE account_id = $1)`,
        [accountId, amount]
      )
    }
    const before = Date.now()
    const recent = await usage(key)
    const after = Date.now()
    expect(recent.status).toBe(200)
    const [from, to] = [Date.parse(recent.body.from), Date.parse(recent.body.to)]
    expect(to).toBeGreaterThanOrEqual(before - 1_000)
    expect(to).toBeLessThanOrEqual(after + 1_000)
    expect(to - from).toBe(30 * 86_400_000)
    // In: the plan's grant of today and the grant of 29 days ago; out: the one of 31 days ago.
    expect(recent.body.totals.granted).toBe(1_000 + 29)
    // Ending two days ago: both dated grants, not today's.
    const onlyTo = await usage(key, `?to=${new Date(to - 2 * 86_400_000).toISOString()}`)
    expect(Date.parse(onlyTo.body.to) - Date.parse(onlyTo.body.from)).toBe(30 * 86_400_000)
    expect(onlyTo.body.totals.granted).toBe(29 + 31)
  })

  test("spent, refunded, granted and expired per operation and per UTC day add up to the journal", async () => {
    const { accountId, key } = await server.account({ plan: "pro", monthly_balance: 100, topup_balance: 50 })
    await meteredRequest(accountId, "search", 2, 1)
    await meteredRequest(accountId, "search", 2, 0)
    await meteredRequest(accountId, "list", 2, 2)
    await meteredRequest(accountId, "hook", 1, 1)
    const failedPrediction = await reserve(accountId, 20, { operation: "prediction", requestId: requestId() })
    await refund(failedPrediction.id)
    const goodPrediction = await reserve(accountId, 20, { operation: "prediction", requestId: requestId() })
    await settle(goodPrediction.id, 20)
    await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 7 } })
    // A pending hold counts as spent until it settles.
    await reserve(accountId, 2, { operation: "search", requestId: requestId() })
    // A grant of the day before, and one from last year (outside every range asked below).
    await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 3 } })
    await server.admin(`/admin/accounts/${accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 11 } })
    // The rows at fixed instants, so the days below do not depend on when (or across which midnight) the test runs:
    // everything at noon (UTC) yesterday, the grant of 3 a day earlier, the grant of 11 400 days earlier.
    const noonYesterday = new Date(Date.now() - 86_400_000)
    noonYesterday.setUTCHours(12, 0, 0, 0)
    const dayBefore = new Date(noonYesterday.getTime() - 86_400_000)
    await server.db.query(
      `UPDATE credit_journal j SET created_at = CASE j.seq WHEN last.seq - 1 THEN $3::timestamptz
                                                         WHEN last.seq THEN $2::timestamptz - interval '400 days'
                                                         ELSE $2::timestamptz END
         FROM (SELECT max(seq) AS seq FROM credit_journal WHERE account_id = $1) last
        WHERE j.account_id = $1`,
      [accountId, noonYesterday.toISOString(), dayBefore.toISOString()]
    )

    const byOperation = await usage(key, "?group_by=operation")
    expect(byOperation.status).toBe(200)
    const rows = Object.fromEntries(byOperation.body.data.map(({ key: operation, ...amounts }) => [operation, amounts]))
    expect(rows).toEqual({
      admin: { spent: 0, refunded: 0, granted: 160, expired: 0, net: 160 },
      get: { spent: 1, refunded: 0, granted: 0, expired: 0, net: -1 },
      list: { spent: 2, refunded: 0, granted: 0, expired: 0, net: -2 },
      predict: { spent: 40, refunded: 20, granted: 0, expired: 0, net: -20 },
      search: { spent: 3, refunded: 0, granted: 0, expired: 0, net: -3 }
    })
    expect(byOperation.body.totals).toEqual({ spent: 46, refunded: 20, granted: 160, expired: 0, net: 134 })
    const { from, to } = byOperation.body
    expect(byOperation.body.totals.net).toBe(await journalSum(accountId, from, to))

    const byDay = await usage(key, `?from=${from}&to=${to}`)
    expect(byDay.body.group_by).toBe("day")
    expect(byDay.body.data.map((row) => row.key)).toEqual([dayBefore.toISOString().slice(0, 10), noonYesterday.toISOString().slice(0, 10)])
    expect(byDay.body.data[0]).toMatchObject({ granted: 3, net: 3 })
    expect(byDay.body.totals).toEqual(byOperation.body.totals)

    // The whole journal, with last year's row, once ranges cover it.
    const lastYear = await usage(key, `?from=${new Date(Date.now() - 402 * 86_400_000).toISOString()}&to=${new Date(Date.now() - 330 * 86_400_000).toISOString()}`)
    expect(lastYear.body.totals).toEqual({ spent: 0, refunded: 0, granted: 11, expired: 0, net: 11 })
    const state = await ledgerState(server.db, accountId)
    expect(byOperation.body.totals.net + lastYear.body.totals.net).toBe(state.journalMonthly + state.journalTopup)
  })

  test("a new period's expiry and grant are counted under rollover", async () => {
    const { accountId, key } = await server.account({ plan: "pro" })
    await meteredRequest(accountId, "hook", 1, 1)
    await server.db.query("UPDATE wallets SET monthly_period_end = now() - interval '1 second' WHERE account_id = $1", [accountId])
    const response = await usage(key, "?group_by=operation")
    const rollover = response.body.data.find((row) => row.key === "rollover")
    expect(rollover).toEqual({ key: "rollover", spent: 0, refunded: 0, granted: 1000, expired: 999, net: 1 })
    expect(response.body.totals.net).toBe(await journalSum(accountId, response.body.from, response.body.to))
  })

  test.each([
    ["from=2026-02-30&to=2026-03-05", "from"],
    ["from=2026-03-01&to=2026-04-31", "to"],
    ["from=2026-02-01T00:00:00Z&to=2026-02-29T00:00:00Z", "to"],
    ["from=2026-03-01T23:60:00Z&to=2026-03-05", "from"]
  ])("a day that does not exist (%s) is 422 naming %s, in the wallet and the admin API", async (query, naming) => {
    const { accountId, key } = await server.account({ plan: "pro" })
    const own = await usage(key, `?${query}`)
    expectEnvelope(own, 422, "validation_error")
    expect((own.body as unknown as ErrorBody).error.message).toContain(naming)
    const admin = await server.admin(`/admin/accounts/${accountId}/usage?${query}`)
    expectEnvelope(admin, 422, "validation_error")
    expect((admin.body as ErrorBody).error.message).toContain(naming)
    // A leap day that exists is read as itself.
    const leap = await usage(key, "?from=2028-02-29&to=2028-03-01")
    expect(leap.status).toBe(200)
    expect(leap.body.from).toBe("2028-02-29T00:00:00.000Z")
  })

  test("a bad range, date or grouping is 422 and a missing key 401; it stays open after plan loss, and in the admin API", async () => {
    const { accountId, key } = await server.account({ plan: "pro", scopes: [] })
    for (const query of [
      "?from=2026-11-20&to=2026-11-10",
      "?from=2026-11-20&to=2026-11-20",
      "?from=2026-01-01&to=2026-11-01",
      "?from=yesterday",
      "?group_by=week",
      "?group_by=day&extra=1"
    ]) {
      expectEnvelope(await usage(key, query), 422, "validation_error")
    }
    expectEnvelope(await server.request("/v1/wallet/usage"), 401, "invalid_api_key")
    await server.admin(`/admin/accounts/${accountId}`, { method: "PATCH", body: { plan: "free" } })
    const open = await usage(key, "?group_by=operation")
    expect(open.status).toBe(200)
    expect(open.body.data.map((row) => row.key)).toEqual(["admin", "rollover"])
    const admin = await server.admin<UsageBody>(`/admin/accounts/${accountId}/usage?group_by=operation`)
    expect(admin.body.totals).toEqual(open.body.totals)
    expectEnvelope(await server.admin("/admin/accounts/acct_00000000000000000000000000000000/usage"), 404, "not_found")
  })
})
