/**
 * Runs one webhook attempt (src/Webhooks/Transport.ts) in its own process and prints the
 * outcome as JSON. The TLS test starts it with NODE_EXTRA_CA_CERTS naming a test certificate
 * authority, which Bun reads only when a process starts.
 *
 * Usage: bun test/support/attempt.ts <url>
 */
import { Duration, Effect } from "effect"
import { makeAttempts, WebhookTransport } from "../../src/Webhooks/Transport.js"

const url = process.argv[2]
const rules = { allowInsecure: false, allowPrivate: true, timeout: Duration.seconds(5), resolveTimeout: Duration.seconds(5) }
const outcome = await Effect.runPromise(
  Effect.flatMap(WebhookTransport, (transport) =>
    makeAttempts(transport, rules).attempt({
      url,
      secrets: [`whsec_${Buffer.alloc(32, 7).toString("base64")}`],
      eventId: "evt_tls",
      body: "{}"
    })
  ).pipe(Effect.provide(WebhookTransport.layer))
)
console.log(JSON.stringify(outcome))
