import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The system of record. Money lives in `wallets` (balances), `holds` (two-phase reservations)
 * and `credit_journal` (every balance change), and only the Ledger writes them.
 * For every account: wallet.monthly_balance == sum(journal.amount where bucket = 'monthly'),
 * and the same for top-up.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE TABLE accounts (
      id             text PRIMARY KEY,
      name           text,
      plan           text NOT NULL,
      monthly_grant  integer NOT NULL DEFAULT 0 CHECK (monthly_grant >= 0),
      suspended      boolean NOT NULL DEFAULT false,
      created_at     timestamptz NOT NULL DEFAULT now(),
      updated_at     timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE api_keys (
      id          text PRIMARY KEY,
      account_id  text NOT NULL REFERENCES accounts(id),
      key_hash    text NOT NULL UNIQUE,
      scopes      text[] NOT NULL,
      created_at  timestamptz NOT NULL DEFAULT now(),
      revoked_at  timestamptz
    );
    CREATE INDEX api_keys_account ON api_keys (account_id);

    CREATE TABLE wallets (
      account_id          text PRIMARY KEY REFERENCES accounts(id),
      monthly_balance     bigint NOT NULL DEFAULT 0 CHECK (monthly_balance >= 0),
      topup_balance       bigint NOT NULL DEFAULT 0 CHECK (topup_balance >= 0),
      period_anchor       timestamptz NOT NULL DEFAULT now(),
      monthly_period_end  timestamptz
    );
    CREATE INDEX wallets_period_end ON wallets (monthly_period_end) WHERE monthly_period_end IS NOT NULL;

    CREATE TABLE holds (
      id               text PRIMARY KEY,
      account_id       text NOT NULL REFERENCES accounts(id),
      monthly_amount   bigint NOT NULL CHECK (monthly_amount >= 0),
      topup_amount     bigint NOT NULL CHECK (topup_amount >= 0),
      status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'settled', 'refunded', 'voided')),
      settled_monthly  bigint NOT NULL DEFAULT 0,
      settled_topup    bigint NOT NULL DEFAULT 0,
      operation        text NOT NULL,
      reference_id     text,
      request_id       text,
      created_at       timestamptz NOT NULL DEFAULT now(),
      expires_at       timestamptz,
      resolved_at      timestamptz
    );
    CREATE INDEX holds_pending_expiry ON holds (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL;
    CREATE INDEX holds_account ON holds (account_id, created_at);

    CREATE TABLE credit_journal (
      seq             bigserial PRIMARY KEY,
      id              text NOT NULL UNIQUE,
      account_id      text NOT NULL REFERENCES accounts(id),
      entry_type      text NOT NULL CHECK (entry_type IN ('grant', 'reserve', 'release', 'expire')),
      bucket          text NOT NULL CHECK (bucket IN ('monthly', 'topup')),
      amount          bigint NOT NULL,
      monthly_after   bigint NOT NULL,
      topup_after     bigint NOT NULL,
      hold_id         text REFERENCES holds(id),
      operation       text,
      reference_id    text,
      request_id      text,
      reason          text,
      created_at      timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX credit_journal_account ON credit_journal (account_id, seq);
    CREATE INDEX credit_journal_hold ON credit_journal (hold_id) WHERE hold_id IS NOT NULL;

    CREATE TABLE categories (
      slug  text PRIMARY KEY,
      name  text NOT NULL
    );

    CREATE TABLE hooks (
      id                 text PRIMARY KEY,
      text               text NOT NULL,
      platform           text NOT NULL,
      media_type         text,
      thumbnail_url      text,
      category           text,
      hook_duration_sec  double precision,
      published_at       timestamptz,
      source_url         text,
      caption            text,
      duration_sec       double precision,
      summary            text,
      emotions           jsonb,
      comment_themes     jsonb,
      metrics            jsonb,
      creator            jsonb,
      audio              jsonb,
      created_at         timestamptz NOT NULL DEFAULT now(),
      updated_at         timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE predictions (
      id                  text PRIMARY KEY,
      account_id          text NOT NULL REFERENCES accounts(id),
      key_id              text NOT NULL REFERENCES api_keys(id),
      status              text NOT NULL CHECK (status IN ('awaiting_upload', 'queued', 'running', 'succeeded', 'failed')),
      hold_id             text REFERENCES holds(id),
      input_duration_sec  double precision,
      result              jsonb,
      error_type          text,
      error_message       text,
      attempts            integer NOT NULL DEFAULT 0,
      claimed_by          text,
      heartbeat_at        timestamptz,
      queued_at           timestamptz,
      started_at          timestamptz,
      completed_at        timestamptz,
      trace_parent        text,
      created_at          timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX predictions_queued ON predictions (queued_at) WHERE status = 'queued';
    CREATE INDEX predictions_running ON predictions (heartbeat_at) WHERE status = 'running';

    CREATE TABLE uploads (
      id             text PRIMARY KEY,
      prediction_id  text NOT NULL UNIQUE REFERENCES predictions(id),
      account_id     text NOT NULL REFERENCES accounts(id),
      key_id         text NOT NULL REFERENCES api_keys(id),
      token_hash     text NOT NULL UNIQUE,
      status         text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'receiving', 'received', 'expired')),
      expires_at     timestamptz NOT NULL,
      blob_key       text,
      size_bytes     bigint,
      media_kind     text,
      received_at    timestamptz,
      created_at     timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX uploads_pending_expiry ON uploads (expires_at) WHERE status = 'pending';

    CREATE TABLE webhooks (
      account_id                  text PRIMARY KEY REFERENCES accounts(id),
      url                         text NOT NULL,
      enabled                     boolean NOT NULL DEFAULT true,
      secret_ciphertext           text NOT NULL,
      previous_secret_ciphertext  text,
      previous_secret_expires_at  timestamptz,
      created_at                  timestamptz NOT NULL DEFAULT now(),
      updated_at                  timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE webhook_deliveries (
      id               text PRIMARY KEY,
      event_id         text NOT NULL,
      account_id       text NOT NULL REFERENCES accounts(id),
      event_type       text NOT NULL,
      payload          jsonb NOT NULL,
      status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
      attempts         integer NOT NULL DEFAULT 0,
      next_attempt_at  timestamptz NOT NULL DEFAULT now(),
      last_status_code integer,
      last_error       text,
      created_at       timestamptz NOT NULL DEFAULT now(),
      completed_at     timestamptz
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

    CREATE TABLE webhook_attempts (
      id            bigserial PRIMARY KEY,
      delivery_id   text NOT NULL REFERENCES webhook_deliveries(id),
      attempted_at  timestamptz NOT NULL DEFAULT now(),
      status_code   integer,
      duration_ms   integer NOT NULL,
      error         text
    );
    CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id);
  `)
})
