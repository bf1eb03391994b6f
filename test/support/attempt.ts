/**
 * Runs one webhook attempt (src/Webhooks/Transport.ts) in its own process and prints the
 * outcome as JSON. The TLS test starts it with NODE_EXTRA_CA_CERTS naming a test certificate
 * authority, which Bun reads only when a process starts.
 *
 * Usage: bun test/support/attempt.ts <url>
 */
import { Duration, Effect } from "effect"
import { attempt } from "../../src/Webhooks/Transport.js"

const url = process.argv[2]
const outcome = await Effect.runPromise(
  attempt(
    { url, secrets: [`whsec_${Buffer.alloc(32, 7).toString("base64")}`], eventId: "evt_tls", body: "{}" },
    { allowInsecure: false, allowPrivate: true, timeout: Duration.seconds(5), resolveTimeout: Duration.seconds(5) }
  )
)
console.log(JSON.stringify(outcome))
