import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Webhook delivery bookkeeping:
 * - `body`: the exact event JSON that is signed and sent (jsonb `payload` reorders keys and
 *   stays for queries);
 * - `claim_token`: the dispatcher claim that currently owns a delivery, so one whose lease ran
 *   out cannot overwrite the outcome recorded by the dispatcher that claimed it next;
 * - `attempt`, `dispatcher`: which attempt of its delivery an attempts row records, and which
 *   dispatcher (one per server process) made it.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    ALTER TABLE webhook_deliveries ADD COLUMN body text;
    ALTER TABLE webhook_deliveries ADD COLUMN claim_token text;
    ALTER TABLE webhook_attempts ADD COLUMN attempt integer;
    ALTER TABLE webhook_attempts ADD COLUMN dispatcher text;
  `)
})
