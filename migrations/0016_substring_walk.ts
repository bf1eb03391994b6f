import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The substring fallback (0006_substring_search.ts) walks on when its pattern is common.
 *
 * A query with no searchable word is made of stop words ("of a", "to do"), whose trigrams are in
 * most hooks: past its first window of newest entries, the fallback asked the trigram index,
 * which handed most of the catalog to the recheck (250 ms for "of a" on a million hooks, the
 * slowest queries of the benchmark's cold mix). When the first window found matches often enough
 * that the page should fill within walk_window * 2 more entries, the walk goes on instead, as far
 * as twice that (a few milliseconds for the commonest); only a rarer pattern goes to the index. Results and cursors are unchanged.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    -- Same arguments, order and positions as hook_search_page's fallback: (sort_ms, id) desc, k1 null.
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
      -- How far the first window's matches must say the page fills for the walk to go on, and
      -- the farthest it goes (twice that: the first window's count is a rough estimate).
      fill_estimate integer := greatest(1, walk_window * 2);
      longer_walk integer := greatest(1, walk_window * 4);
      got integer := 0;
      more integer;
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
      IF got < page_size THEN
        SELECT s.sort_ms, s.id INTO bound_ms, bound_id FROM hook_search s
         WHERE (s.sort_ms, s.id) < (start_ms, start_id)
         ORDER BY s.sort_ms DESC, s.id DESC OFFSET substring_window - 1 LIMIT 1;
        -- A pattern of stop words is common, and so are its trigrams: the index would hand most of
        -- the catalog to the recheck. When the first window says the page fills within a longer
        -- walk, the walk goes on instead.
        IF FOUND AND got > 0 AND substring_window::bigint * (page_size - got) / got <= fill_estimate THEN
          RETURN QUERY
            SELECT w.id, NULL::real, w.sort_ms FROM (
              SELECT s.id, s.sort_ms, s.folded FROM hook_search s
               WHERE (s.sort_ms, s.id) < (bound_ms, bound_id)
               ORDER BY s.sort_ms DESC, s.id DESC LIMIT longer_walk) w
             WHERE strpos(w.folded, query) > 0
             ORDER BY w.sort_ms DESC, w.id DESC LIMIT page_size - got;
          GET DIAGNOSTICS more = ROW_COUNT;
          got := got + more;
          IF got >= page_size THEN
            RETURN;
          END IF;
          SELECT s.sort_ms, s.id INTO bound_ms, bound_id FROM hook_search s
           WHERE (s.sort_ms, s.id) < (bound_ms, bound_id)
           ORDER BY s.sort_ms DESC, s.id DESC OFFSET longer_walk - 1 LIMIT 1;
        END IF;
        IF FOUND AND query ~ '[[:alnum:]]{3}' THEN
          -- Planned with the actual pattern (EXECUTE), so the trigram index is used when it helps.
          RETURN QUERY EXECUTE
            'SELECT m.id, NULL::real, m.sort_ms FROM (
               SELECT s.id, s.sort_ms FROM hook_search s WHERE s.folded LIKE $1 OFFSET 0) m
              WHERE (m.sort_ms, m.id) < ($2, $3)
              ORDER BY m.sort_ms DESC, m.id DESC LIMIT $4'
            USING pattern, bound_ms, bound_id, page_size - got;
        ELSIF FOUND THEN
          -- No three letters in a row, so no trigram to look up: the index would read all of itself.
          RETURN QUERY
            SELECT m.id, NULL::real, m.sort_ms FROM (
              SELECT s.id, s.sort_ms FROM hook_search s WHERE strpos(s.folded, query) > 0 OFFSET 0) m
             WHERE (m.sort_ms, m.id) < (bound_ms, bound_id)
             ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
        END IF;
      END IF;
    END
    $fn$;
  `)
})
