import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Safe retries: stored answers of requests sent with an Idempotency-Key, one grant per billing
 * reference, and the index the credit history pages through holds by.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    -- One row per (scope, key): claimed 'in_progress' by the request running it (owner, kept
    -- alive by locked_at), then 'completed' with the answer to replay (body sealed at rest).
    CREATE TABLE idempotency_keys (
      scope             text NOT NULL,
      key               text NOT NULL,
      fingerprint       text NOT NULL,
      method            text NOT NULL,
      path              text NOT NULL,
      status            text NOT NULL CHECK (status IN ('in_progress', 'completed')),
      owner             text NOT NULL,
      locked_at         timestamptz NOT NULL DEFAULT now(),
      request_id        text,
      response_status   integer,
      response_headers  jsonb,
      response_body     text,
      created_at        timestamptz NOT NULL DEFAULT now(),
      completed_at      timestamptz,
      expires_at        timestamptz NOT NULL,
      PRIMARY KEY (scope, key)
    );
    CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

    -- A billing system's grant reference credits an account once, whatever the concurrency.
    CREATE UNIQUE INDEX credit_journal_grant_reference ON credit_journal (account_id, reference_id)
      WHERE entry_type = 'grant' AND operation = 'admin' AND reference_id IS NOT NULL;
  `)
})
