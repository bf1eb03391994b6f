import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * One time rule: the Ledger's statements are given the time (from the application's clock) as a
 * parameter instead of reading the database's now(). The two key-budget functions of 0010 read
 * now(); they are replaced by ones that take the time as an argument, `at`.
 *
 * - hookline_key_period_end(monthly_period_end, at): the wallet's period end, or the end of the
 *   calendar month (UTC) of `at` for an account without a monthly grant. Immutable now.
 * - hookline_key_spend_limit_reached(key, at): as before, the event's created_at and the period
 *   taken at `at`.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    DROP FUNCTION hookline_key_spend_limit_reached(text);
    DROP FUNCTION hookline_key_period_end(timestamptz);

    CREATE FUNCTION hookline_key_period_end(monthly_period_end timestamptz, at timestamptz) RETURNS timestamptz
      LANGUAGE sql IMMUTABLE AS $$
      SELECT COALESCE(monthly_period_end, (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC')
    $$;

    -- A debit refused by the key's limit: the first refusal of the period sends
    -- key.spend_limit_reached. One statement on the key row, so two refusals at once send it once.
    CREATE FUNCTION hookline_key_spend_limit_reached(key text, at timestamptz) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
      k api_keys;
      period_end timestamptz := (
        SELECT hookline_key_period_end(w.monthly_period_end, at) FROM api_keys a JOIN wallets w ON w.account_id = a.account_id WHERE a.id = key);
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
        'created_at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
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
