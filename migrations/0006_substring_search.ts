import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The substring fallback of search (a q with no searchable word) bounded by a trigram index.
 *
 * hook_search_page's own fallback tests every hook's text with strpos once the newest entries
 * do not fill the page, so a substring found nowhere reads the whole catalog (about 3 s at a
 * million hooks) for an empty page. hook_substring_page walks the same newest entries, then
 * finds older matches through a pg_trgm index on the folded text, so its work grows with the
 * matches instead of the catalog. A pattern without three letters or digits in a row (only
 * punctuation, emoji, one- or two-letter words) has no trigram to look up: it keeps the plain scan,
 * bounded by SEARCH_TIMEOUT alone (the statement is cancelled in the database).
 * pg_trgm ships with PostgreSQL (trusted: a database owner may create it) and with PGlite
 * (loaded in src/EmbeddedDb.ts).
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX hook_search_folded_trgm ON hook_search USING gin (folded gin_trgm_ops);

    -- Same arguments, order and positions as hook_search_page's fallback: (sort_ms, id) desc, k1 null.
    CREATE FUNCTION hook_substring_page(query text, after_k2 bigint, after_id text, page_size integer, walk_window integer)
    RETURNS TABLE (id text, k1 real, k2 bigint)
    LANGUAGE plpgsql STABLE
    SET max_parallel_workers_per_gather = 0
    AS $fn$
    DECLARE
      pattern text := '%' || replace(replace(replace(query, '\\', '\\\\'), '%', '\\%'), '_', '\\_') || '%';
      start_ms bigint := COALESCE(after_k2, 9223372036854775807);
      start_id text := COALESCE(after_id, '');
      substring_window integer := greatest(1, walk_window / 5);
      got integer := 0;
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
