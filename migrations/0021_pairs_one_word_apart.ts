import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The side-by-side index: which hooks hold two given words at adjacent positions, for two-word
 * phrases with a stop word between the words ("wish i knew", "want to stop"); the search that
 * reads it is `hook_search_page` of 0022 (the structures are described in 0002_catalog_search.ts,
 * the walks in 0014, 0015, 0017 and 0019).
 *
 * A two-word search fills its page from a newest-first walk of its top tier, the hooks where each
 * word occurs once and the two stand side by side. For a phrase typed with a stop word between
 * its words, the catalog's hooks hold them one word apart, the side-by-side tier is empty or
 * nearly so, and the search scored every match: "wish i knew" has 27,632 matches and took
 * 143 ms, where a side-by-side pair with as many took 5-15 ms. On the benchmark's cold mix
 * (1,000,000 hooks) such phrases were 1.8 % of the queries and 22 % of the search function's time.
 *
 * `hook_search_side_by_side(doc)` lists a hook's pairs of different lexemes at adjacent
 * positions ("knew wish"), and a GIN index over it finds the hooks with a given pair side by side.
 * When the query's words are one apart and at most a page of hooks has them side by side, the
 * search scores those hooks one by one with the repeaters and fills the page from the tier one
 * word apart, the next rank down (ts_rank falls with the distance between the words).
 */
export default Effect.gen(function*() {
  yield* runScript(`
    -- The distinct pairs of different lexemes at adjacent positions, each as "a b" in sorting order.
    CREATE FUNCTION hook_search_side_by_side(doc tsvector) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $fn$
    DECLARE
      words text[] := '{}';
      entry record;
      at integer;
      pairs text[] := '{}';
      pair text;
    BEGIN
      FOR entry IN SELECT u.lexeme, u.positions FROM unnest(doc) u LOOP
        FOREACH at IN ARRAY COALESCE(entry.positions, '{}') LOOP
          words[at] := entry.lexeme;
        END LOOP;
      END LOOP;
      FOR at IN 2..COALESCE(array_upper(words, 1), 1) LOOP
        IF words[at - 1] <> words[at] THEN
          pair := least(words[at - 1], words[at]) || ' ' || greatest(words[at - 1], words[at]);
          IF NOT pair = ANY (pairs) THEN
            pairs := pairs || pair;
          END IF;
        END IF;
      END LOOP;
      RETURN pairs;
    END
    $fn$;
    CREATE INDEX hook_search_side_by_side ON hook_search USING gin (hook_search_side_by_side(doc));
  `)
})
