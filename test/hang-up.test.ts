/**
 * A client that hangs up mid-request: its request is interrupted DB_CANCEL_GRACE later, so a
 * statement that ends by then finishes (and keeps its connection), and one still running then is
 * cancelled on the server, its hold refunded. The search waits on a catalog this test locks.
 */
import { afterEach, describe, expect, test } from "bun:test"
import type Pg from "pg"
import { startTestServer, type TestServer } from "./support/server.js"

let server: TestServer | undefined
afterEach(async () => {
  await server?.close()
  server = undefined
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

const searchRunning = async (db: Pg.Pool) =>
  (await db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%hook_search%' AND pid <> pg_backend_pid()"
  )).rows[0].n

/** Starts a search on a locked catalog, hangs up once its hold is taken; answers the lock's release. */
const hangUpMidSearch = async (grace: string) => {
  server = await startTestServer({ DB_CANCEL_GRACE: grace, SEARCH_TIMEOUT: "60 seconds" }, { background: false })
  const { accountId, key } = await server.account({ monthly_balance: 100 })
  const locker = await server.db.connect()
  await locker.query("BEGIN")
  await locker.query("LOCK TABLE hooks IN ACCESS EXCLUSIVE MODE")
  const hangUp = new AbortController()
  const search = fetch(`${server.url}/v1/hooks/search?q=money`, { headers: { authorization: `Bearer ${key}` }, signal: hangUp.signal })
    .catch(() => "hung up")
  const db = server.db
  await eventually("the search holds its credits", async () => (await holdStatus(db, accountId)).join() === "pending")
  hangUp.abort()
  expect(await search).toBe("hung up")
  const release = async () => {
    await locker.query("ROLLBACK")
    locker.release()
  }
  return { accountId, db, release }
}

describe("a client that hangs up", () => {
  test("past DB_CANCEL_GRACE: the statement is cancelled on the server and the hold refunded, the catalog still locked", async () => {
    const { accountId, db, release } = await hangUpMidSearch("50 millis")
    try {
      await eventually("the hold is refunded", async () => (await holdStatus(db, accountId)).join() === "refunded")
      expect(await searchRunning(db)).toBe(0)
    } finally {
      await release()
    }
  })

  test("within DB_CANCEL_GRACE: the statement runs to its end and the search is charged as answered", async () => {
    const { accountId, db, release } = await hangUpMidSearch("30 seconds")
    // Past the 50 ms the test above needed to cancel it, the statement still runs.
    await Bun.sleep(500)
    expect(await searchRunning(db)).toBe(1)
    expect(await holdStatus(db, accountId)).toEqual(["pending"])
    await release()
    await eventually("the hold is settled", async () => (await holdStatus(db, accountId)).join() === "settled")
  })
})
