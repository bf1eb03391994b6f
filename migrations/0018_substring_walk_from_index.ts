import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The substring fallback (0006_substring_search.ts, 0016_substring_walk.ts) walks the newest
 * entries from the index alone, and asks the trigram index whenever pg_trgm has a trigram to
 * look up.
 *
 * `hook_search_newest` now carries the folded text beside the tsvector, so the fallback's walk
 * reads index pages in order instead of one table row per entry: about 0.4 µs an entry instead
 * of 4 at a million hooks, a little more than a row of a full scan, but stopping at the page's
 * last match. And pg_trgm finds trigrams at word edges too ("to do" gives "to ", "  d", " do"), so
 * only a pattern with no edge and no three letters in a row ("xq", "!!") lacks one; before, any
 * pattern without three letters in a row read the whole table ("on in my": 340 ms, 55 ms through
 * the index). So, after the first window:
 * - a pattern with a trigram walks on while that window says the page fills within
 *   walk_window * 5 entries, as far as twice that, then asks the index from where the walk ended
 *   (found in the same pass: the walk is read once);
 * - a pattern with none walks on when that window says the page fills within half the catalog,
 *   and otherwise reads the whole table.
 * On the benchmark's 277 stop-word phrases (1,000,000 hooks, first and second pages, one at a
 * time): 15.7–17.4 s in all before, 9.0 s after. Results and cursors are unchanged.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE INDEX hook_search_newest_folded ON hook_search (sort_ms DESC, id DESC) INCLUDE (doc, folded);
    DROP INDEX hook_search_newest;
    ALTER INDEX hook_search_newest_folded RENAME TO hook_search_newest;

    CREATE OR REPLACE FUNCTION hook_substring_page(query text, after_k2 bigint, after_id text, page_size integer, walk_window integer)
    RETURNS TABLE (id text, k1 real, k2 bigint)
    LANGUAGE plpgsql STABLE
    SET max_parallel_workers_per_gather = 0
    AS $fn$
    DECLARE
      pattern text := '%' || replace(replace(replace(query, '\\', '\\\\'), '%', '\\%'), '_', '\\_') || '%';
      start_ms bigint := COALESCE(after_k2, 9223372036854775807);
      start_id text := COALESCE(after_id, '');
      substring_window integer := greatest(1, walk_window / 5);
      -- How far the first window's matches must say the page fills for a pattern with trigrams
      -- to walk on, and the farthest it goes (twice that: the first window's count is a rough
      -- estimate) before asking the trigram index.
      fill_estimate bigint := greatest(1, walk_window::bigint * 5);
      longer_walk bigint := greatest(1, walk_window::bigint * 10);
      -- Whether pg_trgm finds a trigram in the pattern: three letters or digits in a row, or a word
      -- edge inside it (a word is padded with two blanks before it and one after: "to do" gives
      -- "to ", "  d" and " do", while "a!" gives none).
      has_trigram boolean := query ~ '[[:alnum:]]{3}|[^[:alnum:]][[:alnum:]]|[[:alnum:]]{2}[^[:alnum:]]';
      got integer := 0;
      reached_end boolean;
      row_id text;
      row_ms bigint;
      row_match boolean;
      entry_number bigint;
      bound_ms bigint;
      bound_id text;
    BEGIN
      RETURN QUERY
        SELECT w.id, NULL::real, w.sort_ms FROM (
          SELECT s.id, s.sort_ms, s.folded FROM hook_search s
           WHERE (s.sort_ms, s.id) < (start_ms, start_id)
           ORDER BY s.sort_ms DESC, s.id DESC LIMIT substring_window) w
         WHERE strpos(w.folded, query) > 0
         ORDER BY w.sort_ms DESC, w.id DESC LIMIT page_size;
      GET DIAGNOSTICS got = ROW_COUNT;
      IF got >= page_size THEN
        RETURN;
      END IF;
      SELECT s.sort_ms, s.id INTO bound_ms, bound_id FROM hook_search s
       WHERE (s.sort_ms, s.id) < (start_ms, start_id)
       ORDER BY s.sort_ms DESC, s.id DESC OFFSET substring_window - 1 LIMIT 1;
      IF NOT FOUND THEN
        RETURN;
      END IF;
      IF NOT has_trigram THEN
        -- Nothing to look up in the trigram index. A walk entry costs a little more than a row of
        -- a full scan, so the walk goes on to the page's last match when the first window says
        -- that comes within half the catalog; a rarer pattern reads the whole table.
        IF got > 0 AND substring_window::bigint * (page_size - got) / got <= (SELECT c.hooks FROM catalog_state c) / 2 THEN
          RETURN QUERY
            SELECT s.id, NULL::real, s.sort_ms FROM hook_search s
             WHERE (s.sort_ms, s.id) < (bound_ms, bound_id) AND strpos(s.folded, query) > 0
             ORDER BY s.sort_ms DESC, s.id DESC LIMIT page_size - got;
        ELSE
          RETURN QUERY
            SELECT m.id, NULL::real, m.sort_ms FROM (
              SELECT s.id, s.sort_ms FROM hook_search s WHERE strpos(s.folded, query) > 0 OFFSET 0) m
             WHERE (m.sort_ms, m.id) < (bound_ms, bound_id)
             ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
        END IF;
        RETURN;
      END IF;
      IF got > 0 AND substring_window::bigint * (page_size - got) / got <= fill_estimate THEN
        -- The walk's matches in order, and the entry where it ends (for the index's bound), in
        -- one pass: it stops at the page's last match.
        reached_end := true;
        FOR row_id, row_ms, row_match, entry_number IN
          SELECT w.id, w.sort_ms, strpos(w.folded, query) > 0, w.n FROM (
            SELECT s.id, s.sort_ms, s.folded, row_number() OVER (ORDER BY s.sort_ms DESC, s.id DESC) AS n
              FROM hook_search s
             WHERE (s.sort_ms, s.id) < (bound_ms, bound_id)
             ORDER BY s.sort_ms DESC, s.id DESC LIMIT longer_walk) w
           WHERE strpos(w.folded, query) > 0 OR w.n = longer_walk
        LOOP
          IF row_match THEN
            id := row_id;
            k1 := NULL;
            k2 := row_ms;
            RETURN NEXT;
            got := got + 1;
            EXIT WHEN got >= page_size;
          END IF;
          IF entry_number = longer_walk THEN
            reached_end := false;
            bound_ms := row_ms;
            bound_id := row_id;
          END IF;
        END LOOP;
        IF got >= page_size OR reached_end THEN
          RETURN;
        END IF;
      END IF;
      -- Planned with the actual pattern (EXECUTE), so the trigram index is used when it helps.
      RETURN QUERY EXECUTE
        'SELECT m.id, NULL::real, m.sort_ms FROM (
           SELECT s.id, s.sort_ms FROM hook_search s WHERE s.folded LIKE $1 OFFSET 0) m
          WHERE (m.sort_ms, m.id) < ($2, $3)
          ORDER BY m.sort_ms DESC, m.id DESC LIMIT $4'
        USING pattern, bound_ms, bound_id, page_size - got;
    END
    $fn$;
  `)
})
