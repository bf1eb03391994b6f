import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Key budgets: an optional spend limit per API key, counted in the same statement as each debit.
 *
 * - `api_keys.spend_limit`: credits the key may take per period (NULL: no limit).
 * - `api_keys.period_spent` / `spend_period_end`: what the key's debits took in the period that
 *   ends at `spend_period_end`, less what their holds gave back. A debit in a later period starts
 *   the count again from 0 (the row is rewritten by that debit, under its lock).
 * - `api_keys.limit_reached_period_end`: the period whose key.spend_limit_reached event was sent,
 *   so a refusal sends it once per period.
 * - `holds.key_id` / `key_period_end`: the key a hold counted against and in which period, so its
 *   release gives the budget back only in that period.
 * - `credit_journal.key_id`: the key behind a debit and its release (usage by key).
 *
 * A key's period is its account's monthly period (the wallet's `monthly_period_end`); for an
 * account without a monthly grant, the calendar month in UTC (hookline_key_period_end).
 */
export default Effect.gen(function*() {
  yield* runScript(`
    ALTER TABLE api_keys ADD COLUMN spend_limit bigint CHECK (spend_limit >= 0);
    ALTER TABLE api_keys ADD COLUMN period_spent bigint NOT NULL DEFAULT 0 CHECK (period_spent >= 0);
    ALTER TABLE api_keys ADD COLUMN spend_period_end timestamptz;
    ALTER TABLE api_keys ADD COLUMN limit_reached_period_end timestamptz;
    ALTER TABLE holds ADD COLUMN key_id text;
    ALTER TABLE holds ADD COLUMN key_period_end timestamptz;
    ALTER TABLE credit_journal ADD COLUMN key_id text;

    CREATE FUNCTION hookline_key_period_end(monthly_period_end timestamptz) RETURNS timestamptz
      LANGUAGE sql STABLE AS $$
      SELECT COALESCE(monthly_period_end, (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC')
    $$;

    -- A debit refused by the key's limit: the first refusal of the period sends
    -- key.spend_limit_reached. One statement on the key row, so two refusals at once send it once.
    CREATE FUNCTION hookline_key_spend_limit_reached(key text) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
      k api_keys;
      period_end timestamptz := (
        SELECT hookline_key_period_end(w.monthly_period_end) FROM api_keys a JOIN wallets w ON w.account_id = a.account_id WHERE a.id = key);
      event_id text := hookline_new_id('evt');
      delivery_id text := hookline_new_id('dlv');
      body text;
    BEGIN
      UPDATE api_keys SET limit_reached_period_end = period_end
       WHERE id = key AND limit_reached_period_end IS DISTINCT FROM period_end
      RETURNING * INTO k;
      IF NOT FOUND OR NOT EXISTS (
        SELECT 1 FROM webhooks wh WHERE wh.account_id = k.account_id AND wh.enabled
           AND (wh.events IS NULL OR 'key.spend_limit_reached' = ANY (wh.events))) THEN
        RETURN;
      END IF;
      body := json_build_object(
        'id', event_id, 'object', 'event', 'type', 'key.spend_limit_reached',
        'created_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'data', json_build_object(
          'object', 'key_budget',
          'key_id', k.id,
          'spend_limit', k.spend_limit,
          'period_spent', CASE WHEN k.spend_period_end = period_end THEN k.period_spent ELSE 0 END,
          'period_end', to_char(period_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text;
      INSERT INTO webhook_deliveries (id, event_id, account_id, event_type, payload, body)
      VALUES (delivery_id, event_id, k.account_id, 'key.spend_limit_reached', body::jsonb, body);
      PERFORM pg_notify('hookline_webhook_deliveries', delivery_id);
    END $$;
  `)
})
