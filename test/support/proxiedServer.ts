/** A test server on a fresh database that it reaches through a pgProxy, to cut its connection at COMMIT. */
import { pgProxy } from "./pgProxy.js"
import { createDatabase, dropDatabase, startTestServer } from "./server.js"

/**
 * The server runs no background work (no worker claims a queued job) and resolves Idempotency-Keys
 * quickly: a stalled claim is taken over after 1 s, a key looked at again every 20 ms. A transaction
 * the proxy holds open stays open until the test ends it (no DB_IDLE_IN_TRANSACTION_TIMEOUT unless
 * `env` sets one). `close` stops the server and the proxy and drops the database.
 */
export const startProxiedServer = async (env: Record<string, string> = {}) => {
  const databaseUrl = await createDatabase()
  const proxy = pgProxy(new URL(databaseUrl))
  const server = await startTestServer(
    {
      DATABASE_URL: await proxy.listenAsUrl(),
      IDEMPOTENCY_LOCK_TIMEOUT: "1 second",
      IDEMPOTENCY_POLL_INTERVAL: "20 millis",
      DB_IDLE_IN_TRANSACTION_TIMEOUT: "0 seconds",
      ...env
    },
    { databaseUrl, background: false }
  )
  const close = async () => {
    await server.close()
    await proxy.close()
    await dropDatabase(databaseUrl)
  }
  return { proxy, server, close }
}
