import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Top-up grants that can expire. Each top-up grant is a row of `topup_grants` with what is left
 * of it; a wallet's `topup_balance` stays the sum of its live grants' `remaining` (the debit keeps
 * reading and locking the one wallet row).
 *
 * - `topup_grants`: `amount` granted, `remaining`, `expires_at` (NULL: never), `expired_at` once
 *   the expiry has taken what remained (a journal `expire` row carries it, `grant_id` set).
 * - `wallets.next_grant_expiry`: the soonest `expires_at` among the wallet's unexpired grants, so
 *   a debit sees on the row it locks that a grant is due (and the expiry runs first), and the
 *   sweep finds due wallets by an index.
 * - `holds.topup_grants`: the grants a hold took its top-up credits from, in the order taken,
 *   `[[grant_id, credits], ...]`, so a release gives each credit back to its grant.
 * - `credit_journal.grant_id`: the top-up grant a grant or expire row is about.
 * - hookline_take_topup(account, amount, at): takes `amount` from the account's live grants,
 *   soonest-expiring first, never-expiring last (then oldest), and answers what it took. Called by
 *   the debit after it locked and updated the wallet row; VOLATILE, so its query reads the grants
 *   as committed after that lock (the calling statement's snapshot is older).
 *
 * Top-up credits from before: one never-expiring grant per wallet, holding the top-up balance;
 * pending holds with top-up credits took them from it.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE TABLE topup_grants (
      id          text PRIMARY KEY,
      account_id  text NOT NULL REFERENCES accounts(id),
      amount      bigint NOT NULL CHECK (amount > 0),
      remaining   bigint NOT NULL CHECK (remaining >= 0),
      expires_at  timestamptz,
      expired_at  timestamptz,
      created_at  timestamptz NOT NULL
    );
    CREATE INDEX topup_grants_live ON topup_grants (account_id, expires_at, created_at, id) WHERE expired_at IS NULL;

    ALTER TABLE wallets ADD COLUMN next_grant_expiry timestamptz;
    CREATE INDEX wallets_next_grant_expiry ON wallets (next_grant_expiry) WHERE next_grant_expiry IS NOT NULL;
    ALTER TABLE holds ADD COLUMN topup_grants jsonb;
    ALTER TABLE credit_journal ADD COLUMN grant_id text;

    INSERT INTO topup_grants (id, account_id, amount, remaining, created_at)
    SELECT hookline_new_id('grant'), w.account_id, w.topup_balance + h.held, w.topup_balance, now()
      FROM wallets w
      CROSS JOIN LATERAL (
        SELECT COALESCE(sum(topup_amount), 0) AS held FROM holds WHERE account_id = w.account_id AND status = 'pending'
      ) h
     WHERE w.topup_balance + h.held > 0;
    UPDATE holds h SET topup_grants = jsonb_build_array(jsonb_build_array(g.id, h.topup_amount))
      FROM topup_grants g WHERE g.account_id = h.account_id AND h.status = 'pending' AND h.topup_amount > 0;

    CREATE FUNCTION hookline_take_topup(account text, wanted bigint, at timestamptz) RETURNS jsonb
      LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      taken jsonb;
      total bigint;
    BEGIN
      WITH live AS (
        SELECT id, remaining,
               sum(remaining) OVER (ORDER BY expires_at NULLS LAST, created_at, id) AS upto
          FROM topup_grants
         WHERE account_id = account AND expired_at IS NULL AND remaining > 0 AND (expires_at IS NULL OR expires_at > at)
      ),
      take AS (
        SELECT id, LEAST(remaining, wanted - (upto - remaining)) AS n, upto FROM live WHERE upto - remaining < wanted
      ),
      spent AS (
        UPDATE topup_grants g SET remaining = g.remaining - t.n FROM take t WHERE g.id = t.id RETURNING g.id
      )
      SELECT jsonb_agg(jsonb_build_array(t.id, t.n) ORDER BY t.upto), sum(t.n) INTO taken, total
        FROM take t WHERE EXISTS (SELECT 1 FROM spent s WHERE s.id = t.id);
      IF total IS DISTINCT FROM wanted THEN
        RAISE EXCEPTION 'top-up grants of % hold % of the % credits taken from the wallet', account, COALESCE(total, 0), wanted;
      END IF;
      RETURN taken;
    END $$;
  `)
})
