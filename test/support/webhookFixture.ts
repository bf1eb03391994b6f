/** A test server with loopback webhook receivers and the domain services on its database, set up per test file. */
import { afterAll, afterEach, beforeAll } from "bun:test"
import { type Receiver, startReceiver } from "./receiver.js"
import { servicesRuntime } from "./runtime.js"
import { startTestServer, type TestServer } from "./server.js"

export interface WebhookFixture {
  readonly server: TestServer
  readonly runtime: ReturnType<typeof servicesRuntime>
  /** A receiver stopped after the test. */
  readonly receiver: () => Receiver
}

export const webhookFixture = (env: Record<string, string>): WebhookFixture => {
  const receivers: Array<Receiver> = []
  const fixture: { server?: TestServer; runtime?: ReturnType<typeof servicesRuntime> } = {}
  beforeAll(async () => {
    fixture.server = await startTestServer(env)
    fixture.runtime = servicesRuntime(fixture.server.databaseUrl, { ...env, DATA_DIR: fixture.server.dataDir })
  })
  afterAll(async () => {
    await fixture.runtime?.dispose()
    await fixture.server?.close()
  })
  afterEach(async () => {
    await Promise.all(receivers.splice(0).map((r) => r.stop()))
  })
  const started = <A>(value: A | undefined): A => {
    if (value === undefined) throw new Error("the webhook fixture is used before its beforeAll ran")
    return value
  }
  return {
    get server() {
      return started(fixture.server)
    },
    get runtime() {
      return started(fixture.runtime)
    },
    receiver: () => {
      const receiver = startReceiver()
      receivers.push(receiver)
      return receiver
    }
  }
}
