/**
 * The server's pool of PostgreSQL connections (src/Sql.ts): idle connections stay open for
 * PG_IDLE_TIMEOUT (5 minutes by default), not the driver's own 60 s, so a burst of requests after a
 * quiet spell does not wait for new backends; set shorter, they close, and the next request reopens one.
 */
import { describe, expect, test } from "bun:test"
import { ConfigProvider, Duration, Effect } from "effect"
import { pageConnections, ServerConfig } from "../src/Config.js"
import { startTestServer, statementsWaitingOnLocks, type TestServer } from "./support/server.js"

/** The server's own backends on its database, by process id. */
const serverBackends = async (server: TestServer): Promise<Array<number>> => {
  const { rows } = await server.db.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'hookline' ORDER BY pid"
  )
  return rows.map((row) => row.pid)
}

/** Polls `check` until it holds, for at most `boundMs`; answers whether it did. */
const eventually = async (check: () => Promise<boolean>, boundMs: number) => {
  const until = Date.now() + boundMs
  while (Date.now() < until) {
    if (await check()) return true
    await Bun.sleep(50)
  }
  return check()
}

const walletStatus = async (server: TestServer, key: string) => (await server.request("/v1/wallet", { key })).status

describe("idle pool connections", () => {
  test("PG_IDLE_TIMEOUT is 5 minutes unless set", async () => {
    const idleOf = (env: Record<string, string>) =>
      Effect.runPromise(ServerConfig.parse(ConfigProvider.fromEnv({ env })).pipe(Effect.map((config) => Duration.toMillis(config.pgIdleTimeout))))
    expect(await idleOf({})).toBe(5 * 60_000)
    expect(await idleOf({ PG_IDLE_TIMEOUT: "300 millis" })).toBe(300)
  })

  test("stay open under the default while a server set shorter closes its own, and the next request reopens one", async () => {
    const [kept, closed] = await Promise.all([
      startTestServer({}, { background: false }),
      startTestServer({ PG_IDLE_TIMEOUT: "300 millis" }, { background: false })
    ])
    try {
      const keys = await Promise.all([kept.account(), closed.account()])
      expect(await walletStatus(kept, keys[0].key)).toBe(200)
      expect(await walletStatus(closed, keys[1].key)).toBe(200)
      const keptBefore = await serverBackends(kept)
      expect(keptBefore.length).toBeGreaterThan(0)
      expect((await serverBackends(closed)).length).toBeGreaterThan(0)

      expect(await eventually(async () => (await serverBackends(closed)).length === 0, 10_000)).toBe(true)
      // Idle at least as long as the short timeout: the default kept them.
      expect(await serverBackends(kept)).toEqual(keptBefore)
      // The next request opens a connection again.
      expect(await walletStatus(closed, keys[1].key)).toBe(200)
      expect((await serverBackends(closed)).length).toBeGreaterThan(0)
    } finally {
      await Promise.all([kept.close(), closed.close()])
    }
  }, 60_000)
})

describe("the catalog pages' own connections, carved out of PG_MAX_CONNECTIONS", () => {
  test("SEARCH_CONCURRENCY of them, leaving at least one to the shared pool", async () => {
    const pagesOf = (env: Record<string, string>) =>
      Effect.runPromise(ServerConfig.parse(ConfigProvider.fromEnv({ env })).pipe(Effect.map(pageConnections)))
    expect(await pagesOf({})).toBe(6)
    expect(await pagesOf({ PG_MAX_CONNECTIONS: "20", SEARCH_CONCURRENCY: "8" })).toBe(8)
    expect(await pagesOf({ PG_MAX_CONNECTIONS: "4", SEARCH_CONCURRENCY: "6" })).toBe(3)
    expect(await pagesOf({ PG_MAX_CONNECTIONS: "1" })).toBe(0)
  })

  test("under concurrent searches and wallet reads, the server never holds more than PG_MAX_CONNECTIONS", async () => {
    const server = await startTestServer({ PG_MAX_CONNECTIONS: "3", SEARCH_CONCURRENCY: "2", CATALOG_CACHE_ENTRIES: "0" }, { background: false })
    try {
      const { key } = await server.account({ plan: "enterprise", monthly_balance: 10_000 })
      let most = 0
      let running = true
      const sampling = (async () => {
        while (running) {
          most = Math.max(most, (await serverBackends(server)).length)
          await Bun.sleep(5)
        }
      })()
      const statuses = await Promise.all(Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0 ? server.request(`/v1/hooks/search?q=connection${i}`, { key }).then((response) => response.status) : walletStatus(server, key)))
      running = false
      await sampling
      expect(statuses).toEqual(Array.from({ length: 40 }, () => 200))
      // Both pools were in use: the shared one for the holds and wallet reads, the pages' own for the searches.
      expect(most).toBeGreaterThanOrEqual(2)
      expect(most).toBeLessThanOrEqual(3)
    } finally {
      await server.close()
    }
  }, 60_000)
})

describe("statements pipelined on a shared connection (DB_PIPELINE)", () => {
  /**
   * Account A's hold waits for its wallet row, locked by the test; ten wallet reads of account B
   * follow. Answers how many of B's reads were answered while A's statement still waited.
   */
  const answeredBehindALockWait = async (depth: string) => {
    const server = await startTestServer({ DB_PIPELINE_DEPTH: depth, CATALOG_CACHE_ENTRIES: "0" }, { background: false })
    const locker = await server.db.connect()
    try {
      const [a, b] = await Promise.all([server.account({ monthly_balance: 100 }), server.account()])
      // Both keys known to the server's key cache, so each request below sends one statement.
      expect(await walletStatus(server, a.key)).toBe(200)
      expect(await walletStatus(server, b.key)).toBe(200)
      await locker.query("BEGIN")
      await locker.query("SELECT 1 FROM wallets WHERE account_id = $1 FOR UPDATE", [a.accountId])
      const held = server.request("/v1/hooks/search?q=pipelined", { key: a.key })
      const waitingForLock = async () => (await statementsWaitingOnLocks(server.db)) === 1
      expect(await eventually(waitingForLock, 10_000)).toBe(true)
      let answered = 0
      const reads = Array.from({ length: 10 }, () => walletStatus(server, b.key).then((status) => {
        if (status === 200) answered++
        return status
      }))
      await eventually(async () => answered >= 9, 5_000)
      const whileLocked = answered
      expect(await waitingForLock()).toBe(true)
      await locker.query("ROLLBACK")
      expect(await Promise.all(reads)).toEqual(Array.from({ length: 10 }, () => 200))
      expect((await held).status).toBe(200)
      return whileLocked
    } finally {
      locker.release()
      await server.close()
    }
  }

  test("a statement waiting for a lock holds up at most DB_PIPELINE_DEPTH - 1 statements of other requests", async () => {
    expect(await answeredBehindALockWait("2")).toBeGreaterThanOrEqual(9)
  }, 60_000)
})
