/** A test server with loopback webhook receivers and the domain services on its database, set up per test file. */
import { afterAll, afterEach, beforeAll } from "bun:test"
import { randomBytes } from "node:crypto"
import type { Prediction } from "../../src/Predictions/Api.js"
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

/** A finished prediction, as the event data of prediction.succeeded / prediction.failed. */
export const samplePrediction = (status: "succeeded" | "failed" = "succeeded"): Prediction => ({
  object: "prediction",
  id: `pred_${randomBytes(16).toString("hex")}`,
  status,
  created_at: "2026-11-22T14:28:55.123Z",
  completed_at: "2026-11-22T14:29:10.456Z",
  input: { duration_sec: 21.5 },
  result: status === "succeeded"
    ? { band: "medium", hook_duration_sec: 2.25, category: null, hook_text: null, hook_text_confidence: null, similar_hooks: [] }
    : null,
  error: status === "failed" ? { type: "analysis_failed", message: "The clip could not be analysed." } : null
})
