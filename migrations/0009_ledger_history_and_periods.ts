import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The credit history without walking free holds, monthly credits held across a period, and a dead branch of search.
 *
 * - `holds.period_end`: the wallet's `monthly_period_end` when the hold was opened. A hold
 *   resolved after the wallet moved to another period (a rollover or a plan change) does not
 *   return its monthly part to the new period's balance: that part expires (journaled as
 *   `release` + `expire`). Pending holds are taken to belong to the current period.
 * - `holds.history_seq`: where a request's settled charge stands in the credit history, a value
 *   of the journal's own sequence drawn when it settles (NULL for holds the history does not
 *   list: refunded, voided, settled for 0, and prediction holds, whose journal rows are listed).
 *   With the partial index on the journal rows the history does list, a page of history reads
 *   about a page of rows, however many empty searches (a hold and two journal rows each, listed
 *   nowhere) the account ran. Existing settled holds get the seq of their last journal row, the
 *   position the history gave them so far.
 * - `hook_search_page`'s own substring fallback (a q with no searchable word) read the whole
 *   catalog for a pattern found nowhere; the server calls `hook_substring_page` (0006) for such
 *   a q since then. The branch now delegates to it, so no caller can reach the unbounded scan.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    ALTER TABLE holds ADD COLUMN period_end timestamptz;
    ALTER TABLE holds ADD COLUMN history_seq bigint;
    UPDATE holds h SET period_end = w.monthly_period_end
      FROM wallets w WHERE w.account_id = h.account_id AND h.status = 'pending';
    UPDATE holds h SET history_seq = (SELECT max(j.seq) FROM credit_journal j WHERE j.hold_id = h.id)
     WHERE h.status = 'settled' AND h.operation <> 'prediction' AND h.settled_monthly + h.settled_topup > 0;
    CREATE INDEX holds_history ON holds (account_id, history_seq) WHERE history_seq IS NOT NULL;
    CREATE INDEX credit_journal_history ON credit_journal (account_id, seq)
      WHERE hold_id IS NULL OR operation = 'prediction' OR entry_type = 'expire';
  `)
  yield* runScript(`
    DO $$
    DECLARE
      old_definition text := pg_get_functiondef('hook_search_page(text, real, bigint, text, integer, integer)'::regprocedure);
      new_definition text := regexp_replace(
        old_definition,
        'IF numnode\\(q\\) = 0 THEN.*?ELSIF numnode\\(q\\) = 1 THEN',
        'IF numnode(q) = 0 THEN
        RETURN QUERY SELECT * FROM hook_substring_page(query, after_k2, after_id, page_size, walk_window);
      ELSIF numnode(q) = 1 THEN'
      );
    BEGIN
      IF new_definition = old_definition THEN
        RAISE EXCEPTION 'hook_search_page: the substring fallback branch was not found';
      END IF;
      EXECUTE new_definition;
    END $$;
  `)
})
