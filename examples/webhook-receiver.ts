/**
 * A webhook receiver for local development (README, "API tour"): listens on 127.0.0.1, checks
 * each delivery's Standard Webhooks signature and prints the event.
 *
 *   npx bun examples/webhook-receiver.ts whsec_… [port]     (port 9000 unless given)
 *
 * The server must allow a plain-http loopback URL: WEBHOOK_ALLOW_INSECURE=true and
 * WEBHOOK_ALLOW_PRIVATE=true (development only).
 */
import { Webhook } from "standardwebhooks"

const [secret, port = "9000"] = process.argv.slice(2)
if (secret === undefined) {
  console.error("usage: npx bun examples/webhook-receiver.ts whsec_… [port]")
  process.exit(1)
}
const webhook = new Webhook(secret)

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: Number(port),
  async fetch(request) {
    const body = await request.text()
    try {
      // Throws unless one signature matches and the timestamp is within 5 minutes.
      const event = webhook.verify(body, Object.fromEntries(request.headers)) as { id: string; type: string }
      // A test send (POST /v1/webhooks/test) carries hookline-test: true; its prediction is made up.
      const test = request.headers.get("hookline-test") === "true" ? " [test send]" : ""
      console.log(`verified ${event.type} ${event.id} (webhook-id ${request.headers.get("webhook-id")})${test}`)
      return new Response(null, { status: 204 })
    } catch (error) {
      console.log(`refused a delivery: ${error instanceof Error ? error.message : String(error)}`)
      return new Response(null, { status: 400 })
    }
  }
})
console.log(`webhook receiver listening on http://127.0.0.1:${server.port}/`)
