/**
 * A client that hangs up mid-request: its request is interrupted DB_CANCEL_GRACE later, so a
 * statement that ends by then finishes (and keeps its connection), and one still running then is
 * cancelled on the server, its hold refunded. The search waits on a catalog this test locks.
 */
import { afterEach, describe, expect, test } from "bun:test"
import type Pg from "pg"
import { startTestServer, statementsRunning, type TestServer } from "./support/server.js"

const servers: Array<TestServer> = []
afterEach(async () => {
  for (const server of servers.splice(0).reverse()) await server.close()
})

/** Polls `check` until it holds, for at most 10 s; fails loudly naming `what` otherwise. */
const eventually = async (what: string, check: () => Promise<boolean>) => {
  const until = Date.now() + 10_000
  while (Date.now() < until) {
    if (await check()) return
    await Bun.sleep(20)
  }
  throw new Error(`timed out waiting for: ${what}`)
}

const holdStatus = async (db: Pg.Pool, accountId: string) =>
  (await db.query<{ status: string }>("SELECT status FROM holds WHERE account_id = $1", [accountId])).rows.map((row) => row.status)

/** What the account's holds settled for, and its wallet's monthly balance after. */
const charged = async (db: Pg.Pool, accountId: string) => {
  const { rows } = await db.query<{ settled: number; monthly: number }>(
    `SELECT (SELECT sum(settled_monthly + settled_topup)::int FROM holds WHERE account_id = $1) AS settled,
            (SELECT monthly_balance::int FROM wallets WHERE account_id = $1) AS monthly`,
    [accountId]
  )
  return rows[0]
}

/** Three hooks the search for "money" finds: an answered search settles ceil(3 / 25) = 1 credit. */
const importMoneyHooks = async (server: TestServer) => {
  const lines = ["Save money on groceries", "Money habits that stick", "Where your money goes"]
    .map((text, index) => JSON.stringify({ text, platform: "tiktok", source_url: `https://example.com/money/${index}` }))
  const imported = await server.admin<{ inserted: number }>("/admin/catalog/hooks", {
    method: "POST",
    rawBody: lines.join("\n"),
    headers: { "content-type": "application/x-ndjson" }
  })
  expect(imported.status).toBe(200)
  expect(imported.body).toMatchObject({ inserted: 3, rejected_count: 0 })
}

/** A server with this DB_CANCEL_GRACE (on `databaseUrl` when given, else a new database). */
const serverWithGrace = async (grace: string, databaseUrl?: string) => {
  const server = await startTestServer({ DB_CANCEL_GRACE: grace, SEARCH_TIMEOUT: "60 seconds" }, { background: false, databaseUrl })
  servers.push(server)
  return server
}

/** Locks the catalog, so a search waits on it until `release`. */
const lockCatalog = async (server: TestServer) => {
  const locker = await server.db.connect()
  await locker.query("BEGIN")
  await locker.query("LOCK TABLE hooks IN ACCESS EXCLUSIVE MODE")
  return async () => {
    await locker.query("ROLLBACK")
    locker.release()
  }
}

/** Starts a search on the (locked) catalog and waits until its hold is taken; `hangUp` aborts it. */
const startSearch = async (server: TestServer) => {
  const { accountId, key } = await server.account({ monthly_balance: 100 })
  const connection = new AbortController()
  const search = fetch(`${server.url}/v1/hooks/search?q=money`, { headers: { authorization: `Bearer ${key}` }, signal: connection.signal })
    .catch(() => "hung up")
  await eventually("the search holds its credits", async () => (await holdStatus(server.db, accountId)).join() === "pending")
  return {
    accountId,
    hangUp: async () => {
      connection.abort()
      expect(await search).toBe("hung up")
    }
  }
}

describe("a client that hangs up", () => {
  test("past DB_CANCEL_GRACE: the statement is cancelled on the server and the hold refunded, the catalog still locked", async () => {
    const server = await serverWithGrace("50 millis")
    const release = await lockCatalog(server)
    try {
      const search = await startSearch(server)
      await search.hangUp()
      await eventually("the hold is refunded", async () => (await holdStatus(server.db, search.accountId)).join() === "refunded")
      expect(await statementsRunning(server.db, "%hook_search%")).toBe(0)
    } finally {
      await release()
    }
  })

  test("within DB_CANCEL_GRACE: the statement runs to its end and the search is charged as answered", async () => {
    const server = await serverWithGrace("30 seconds")
    // A second server in this process on the same database, with the short grace of the test above:
    // its client hangs up after this one's, so once its statement is cancelled, this one's would
    // have been too had it been given the short grace.
    const shortGrace = await serverWithGrace("50 millis", server.databaseUrl)
    await importMoneyHooks(server)
    const release = await lockCatalog(server)
    let accountId = ""
    try {
      const search = await startSearch(server)
      accountId = search.accountId
      const witness = await startSearch(shortGrace)
      await search.hangUp()
      await witness.hangUp()
      await eventually("the short grace's hold is refunded", async () => (await holdStatus(server.db, witness.accountId)).join() === "refunded")
      expect(await statementsRunning(server.db, "%hook_search%")).toBe(1)
      expect(await holdStatus(server.db, accountId)).toEqual(["pending"])
    } finally {
      await release()
    }
    await eventually("the hold is settled", async () => (await holdStatus(server.db, accountId)).join() === "settled")
    // Charged as the answered page it was: three results, one credit (the reserve of 2 less the one given back).
    expect(await charged(server.db, accountId)).toEqual({ settled: 1, monthly: 99 })
  })
})
