import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Search structures for the hook catalog (see src/Hooks/HookCatalog.ts for how they are read).
 *
 * - `hook_search`: one narrow row per hook (id, sort key, category, English tsvector, lowercased
 *   text), kept in step with `hooks` by statement-level triggers, so ranking never touches the
 *   wide ~1 KB rows. `sort_ms` is published_at in epoch milliseconds (hooks without a date
 *   sort last), so every ordering is a plain keyset on (…, sort_ms, id).
 * - `hook_search_newest` covers (sort_ms, id) *with* the tsvector, so walking the newest hooks
 *   and testing a term is an index-only scan.
 * - `hook_search_repeats`: the (term, hook) pairs where the term occurs more than once. A
 *   one-word query ranks hooks by how often the term occurs (that is what ts_rank amounts to
 *   for one term), so its top tier comes straight from this small index and the rest is the
 *   newest-first walk: no query has to score every match of a common word.
 * - `hook_search_terms`: how many hooks contain each term, and `catalog_state.hooks` how many
 *   hooks there are, so a one-word search knows at once whether walking the newest hooks will
 *   fill a page soon (common word) or whether to sort the term's few index matches (rare word).
 * - `catalog_state.version` changes with every write to `hooks` (the first-page cache key).
 * - `hook_search_page(...)`: one page of search results as keyset positions; the server and the
 *   benchmark's bare baseline call the same function.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE TABLE hook_search (
      id        text PRIMARY KEY,
      sort_ms   bigint NOT NULL,
      category  text,
      doc       tsvector NOT NULL,
      folded    text NOT NULL
    );
    CREATE INDEX hook_search_doc ON hook_search USING gin (doc);
    CREATE INDEX hook_search_newest ON hook_search (sort_ms DESC, id DESC) INCLUDE (doc);
    CREATE INDEX hook_search_category ON hook_search (category, sort_ms DESC, id DESC);

    CREATE TABLE hook_search_repeats (
      lexeme       text NOT NULL,
      id           text NOT NULL,
      occurrences  integer NOT NULL,
      sort_ms      bigint NOT NULL,
      PRIMARY KEY (lexeme, id)
    );
    CREATE INDEX hook_search_repeats_rank ON hook_search_repeats (lexeme, occurrences DESC, sort_ms DESC, id DESC);
    CREATE INDEX hook_search_repeats_id ON hook_search_repeats (id);

    CREATE TABLE hook_search_terms (
      lexeme  text PRIMARY KEY,
      hooks   integer NOT NULL
    );

    CREATE TABLE catalog_state (
      singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      version    bigint NOT NULL,
      hooks      bigint NOT NULL
    );
    INSERT INTO catalog_state (singleton, version, hooks) VALUES (true, 1, 0);

    -- Adds delta to the hook count of each term of the given documents (sorted, so concurrent
    -- writers lock term rows in one order).
    CREATE FUNCTION hook_search_count_terms(docs tsvector[], delta integer) RETURNS void LANGUAGE sql AS $fn$
      INSERT INTO hook_search_terms (lexeme, hooks)
      SELECT t.lexeme, delta * count(*) FROM unnest(docs) d, unnest(d) t GROUP BY t.lexeme ORDER BY t.lexeme
      ON CONFLICT (lexeme) DO UPDATE SET hooks = hook_search_terms.hooks + EXCLUDED.hooks;
    $fn$;

    CREATE FUNCTION hook_search_upsert_from(changed_ids text[]) RETURNS void LANGUAGE sql AS $fn$
      SELECT hook_search_count_terms(ARRAY(SELECT s.doc FROM hook_search s WHERE s.id = ANY (changed_ids)), -1);
      UPDATE catalog_state SET hooks = hooks + (
        SELECT count(*) FROM unnest(changed_ids) c WHERE NOT EXISTS (SELECT 1 FROM hook_search s WHERE s.id = c));
      INSERT INTO hook_search (id, sort_ms, category, doc, folded)
      SELECT h.id,
             COALESCE(floor(extract(epoch FROM h.published_at) * 1000)::bigint, -9000000000000000),
             h.category, to_tsvector('english', h.text), lower(h.text)
        FROM hooks h WHERE h.id = ANY (changed_ids)
      ON CONFLICT (id) DO UPDATE
        SET sort_ms = EXCLUDED.sort_ms, category = EXCLUDED.category, doc = EXCLUDED.doc, folded = EXCLUDED.folded;
      DELETE FROM hook_search_repeats WHERE id = ANY (changed_ids);
      INSERT INTO hook_search_repeats (lexeme, id, occurrences, sort_ms)
      SELECT t.lexeme, s.id, array_length(t.positions, 1), s.sort_ms
        FROM hook_search s, unnest(s.doc) t
       WHERE s.id = ANY (changed_ids) AND array_length(t.positions, 1) >= 2;
      SELECT hook_search_count_terms(ARRAY(SELECT s.doc FROM hook_search s WHERE s.id = ANY (changed_ids)), 1);
      UPDATE catalog_state SET version = version + 1;
    $fn$;

    CREATE FUNCTION hook_search_remove(removed_ids text[]) RETURNS void LANGUAGE sql AS $fn$
      SELECT hook_search_count_terms(ARRAY(SELECT s.doc FROM hook_search s WHERE s.id = ANY (removed_ids)), -1);
      UPDATE catalog_state SET hooks = hooks - (SELECT count(*) FROM hook_search s WHERE s.id = ANY (removed_ids));
      DELETE FROM hook_search WHERE id = ANY (removed_ids);
      DELETE FROM hook_search_repeats WHERE id = ANY (removed_ids);
      UPDATE catalog_state SET version = version + 1;
    $fn$;

    CREATE FUNCTION hook_search_after_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM hook_search_upsert_from(ARRAY(SELECT id FROM inserted_hooks));
      RETURN NULL;
    END
    $fn$;

    CREATE FUNCTION hook_search_after_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM hook_search_remove(ARRAY(SELECT id FROM hooks_before EXCEPT SELECT id FROM hooks_after));
      PERFORM hook_search_upsert_from(ARRAY(SELECT id FROM hooks_after));
      RETURN NULL;
    END
    $fn$;

    CREATE FUNCTION hook_search_after_delete() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      PERFORM hook_search_remove(ARRAY(SELECT id FROM deleted_hooks));
      RETURN NULL;
    END
    $fn$;

    CREATE FUNCTION hook_search_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      TRUNCATE hook_search, hook_search_repeats, hook_search_terms;
      UPDATE catalog_state SET version = version + 1, hooks = 0;
      RETURN NULL;
    END
    $fn$;

    CREATE TRIGGER hooks_search_insert AFTER INSERT ON hooks
      REFERENCING NEW TABLE AS inserted_hooks FOR EACH STATEMENT EXECUTE FUNCTION hook_search_after_insert();
    CREATE TRIGGER hooks_search_update AFTER UPDATE ON hooks
      REFERENCING OLD TABLE AS hooks_before NEW TABLE AS hooks_after FOR EACH STATEMENT EXECUTE FUNCTION hook_search_after_update();
    CREATE TRIGGER hooks_search_delete AFTER DELETE ON hooks
      REFERENCING OLD TABLE AS deleted_hooks FOR EACH STATEMENT EXECUTE FUNCTION hook_search_after_delete();
    CREATE TRIGGER hooks_search_truncate AFTER TRUNCATE ON hooks
      FOR EACH STATEMENT EXECUTE FUNCTION hook_search_after_truncate();

    -- One page of search results, best first, as keyset positions (id, k1, k2):
    --   no searchable word  -> substring of the lowercased text; order (sort_ms, id) desc; k1 null
    --   one search term     -> k1 = occurrences of the term; order (k1, sort_ms, id) desc
    --   several terms       -> k1 = ts_rank(doc, plainto_tsquery(query)); order (k1, sort_ms, id) desc
    --                          (two words: the top tier of adjacent pairs is walked, see below)
    -- For one term, ts_rank grows strictly with the number of occurrences, so both orders agree
    -- with "ranked by ts_rank, ties by newest then id". A page after a cursor continues strictly
    -- below the cursor's position, so rows added meanwhile never shift or repeat a walk.
    -- query: the normalised query (trimmed, single spaces, lowercase).
    -- walk_window: how many of the newest entries a one-word query walks (index-only) to fill a
    -- page; a word too rare to fill it there has its GIN matches sorted instead. Substring
    -- queries walk a fifth of it (they read the heap). Only speed depends on it, never results.
    CREATE FUNCTION hook_search_page(query text, after_k1 real, after_k2 bigint, after_id text, page_size integer, walk_window integer)
    RETURNS TABLE (id text, k1 real, k2 bigint)
    LANGUAGE plpgsql STABLE
    SET max_parallel_workers_per_gather = 0
    AS $fn$
    DECLARE
      q tsquery := plainto_tsquery('english', query);
      term text;
      single_rank real := ts_rank('x:1'::tsvector, 'x'::tsquery);
      got integer := 0;
      more integer;
      term_hooks bigint;
      all_hooks bigint;
      pair text[];
      adjacent_rank real := ts_rank('a:1 b:2'::tsvector, 'a & b'::tsquery);
      page_ids text[];
      page_ranks real[];
      page_sorts bigint[];
      start_ms bigint := 9223372036854775807;
      start_id text := '';
      bound_ms bigint;
      bound_id text;
      substring_window integer := greatest(1, walk_window / 5);
    BEGIN
      IF after_id IS NOT NULL THEN
        start_ms := after_k2;
        start_id := after_id;
      END IF;

      IF numnode(q) = 0 THEN
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
          IF FOUND THEN
            RETURN QUERY
              SELECT m.id, NULL::real, m.sort_ms FROM (
                SELECT s.id, s.sort_ms FROM hook_search s WHERE strpos(s.folded, query) > 0 OFFSET 0) m
               WHERE (m.sort_ms, m.id) < (bound_ms, bound_id)
               ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
          END IF;
        END IF;

      ELSIF numnode(q) = 1 THEN
        SELECT t.lexeme INTO term FROM unnest(to_tsvector('english', query)) t LIMIT 1;
        -- Hooks where the term occurs more than once come first, most occurrences first.
        IF after_id IS NULL OR after_k1 > 1 THEN
          RETURN QUERY
            SELECT r.id, r.occurrences::real, r.sort_ms FROM hook_search_repeats r
             WHERE r.lexeme = term
               AND (r.occurrences, r.sort_ms, r.id) < (COALESCE(after_k1::integer, 2147483647), start_ms, start_id)
             ORDER BY r.occurrences DESC, r.sort_ms DESC, r.id DESC LIMIT page_size;
          GET DIAGNOSTICS got = ROW_COUNT;
          start_ms := 9223372036854775807;
          start_id := '';
        END IF;
        -- Then every hook where it occurs once (all the same rank), newest first: walked for a
        -- word common enough to fill the page within the window, else sorted from the GIN matches.
        SELECT COALESCE((SELECT hooks FROM hook_search_terms WHERE lexeme = term), 0), c.hooks
          INTO term_hooks, all_hooks FROM catalog_state c;
        IF got < page_size AND term_hooks * walk_window < (page_size - got) * all_hooks THEN
          RETURN QUERY
            SELECT m.id, 1::real, m.sort_ms FROM (
              SELECT s.id, s.sort_ms, s.doc FROM hook_search s WHERE s.doc @@ q OFFSET 0) m
             WHERE (m.sort_ms, m.id) < (start_ms, start_id) AND ts_rank(m.doc, q) = single_rank
             ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
        ELSIF got < page_size THEN
          RETURN QUERY
            SELECT w.id, 1::real, w.sort_ms FROM (
              SELECT s.id, s.sort_ms, s.doc FROM hook_search s
               WHERE (s.sort_ms, s.id) < (start_ms, start_id)
               ORDER BY s.sort_ms DESC, s.id DESC LIMIT walk_window) w
             WHERE CASE WHEN w.doc @@ q THEN ts_rank(w.doc, q) = single_rank ELSE false END
             ORDER BY w.sort_ms DESC, w.id DESC LIMIT page_size - got;
          GET DIAGNOSTICS more = ROW_COUNT;
          got := got + more;
          IF got < page_size THEN
            SELECT s.sort_ms, s.id INTO bound_ms, bound_id FROM hook_search s
             WHERE (s.sort_ms, s.id) < (start_ms, start_id)
             ORDER BY s.sort_ms DESC, s.id DESC OFFSET walk_window - 1 LIMIT 1;
            IF FOUND THEN
              RETURN QUERY
                SELECT m.id, 1::real, m.sort_ms FROM (
                  SELECT s.id, s.sort_ms, s.doc FROM hook_search s WHERE s.doc @@ q OFFSET 0) m
                 WHERE (m.sort_ms, m.id) < (bound_ms, bound_id) AND ts_rank(m.doc, q) = single_rank
                 ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
            END IF;
          END IF;
        END IF;

      ELSE
        -- Two words: every hook where each occurs once and they stand side by side has the same
        -- rank, the highest such hooks can have; only hooks repeating a word rank above it. When
        -- that top tier is common, the page comes from those few repeaters plus a newest-first
        -- walk of the tier, instead of scoring every match.
        IF numnode(q) = 3 THEN
          SELECT array_agg(t.lexeme ORDER BY t.lexeme) INTO pair FROM unnest(to_tsvector('english', query)) t;
        END IF;
        IF array_length(pair, 1) = 2 AND (after_id IS NULL OR after_k1 >= adjacent_rank) THEN
          SELECT c.hooks, COALESCE((SELECT min(t.hooks) FROM hook_search_terms t WHERE t.lexeme = ANY (pair) HAVING count(*) = 2), 0)
            INTO all_hooks, term_hooks FROM catalog_state c;
          IF term_hooks * walk_window >= page_size * all_hooks
             AND (SELECT count(*) FROM (SELECT 1 FROM hook_search_repeats r WHERE r.lexeme = ANY (pair) LIMIT walk_window / 5 + 1) x) <= walk_window / 5 THEN
            IF after_id IS NOT NULL AND after_k1 > adjacent_rank THEN
              start_ms := 9223372036854775807;
              start_id := '';
            END IF;
            SELECT array_agg(p.id ORDER BY p.rank DESC, p.sort_ms DESC, p.id DESC),
                   array_agg(p.rank ORDER BY p.rank DESC, p.sort_ms DESC, p.id DESC),
                   array_agg(p.sort_ms ORDER BY p.rank DESC, p.sort_ms DESC, p.id DESC)
              INTO page_ids, page_ranks, page_sorts
              FROM (
                (SELECT a.id, a.rank, a.sort_ms FROM (
                   SELECT h.id, ts_rank(h.doc, q) AS rank, h.sort_ms
                     FROM (SELECT DISTINCT r.id FROM hook_search_repeats r WHERE r.lexeme = ANY (pair)) c,
                          LATERAL (SELECT s.id, s.doc, s.sort_ms FROM hook_search s WHERE s.id = c.id OFFSET 0) h
                    WHERE h.doc @@ q) a
                  WHERE a.rank > adjacent_rank
                    AND (a.rank, a.sort_ms, a.id) < (COALESCE(after_k1, 'Infinity'::real), COALESCE(after_k2, 9223372036854775807), COALESCE(after_id, ''))
                  ORDER BY a.rank DESC, a.sort_ms DESC, a.id DESC LIMIT page_size)
                UNION ALL
                (SELECT w.id, adjacent_rank, w.sort_ms FROM (
                   SELECT s.id, s.sort_ms, s.doc FROM hook_search s
                    WHERE (s.sort_ms, s.id) < (start_ms, start_id)
                    ORDER BY s.sort_ms DESC, s.id DESC LIMIT walk_window) w
                  WHERE CASE WHEN w.doc @@ q THEN ts_rank(w.doc, q) = adjacent_rank ELSE false END
                  ORDER BY w.sort_ms DESC, w.id DESC LIMIT page_size)
              ) p;
            IF COALESCE(array_length(page_ids, 1), 0) >= page_size THEN
              RETURN QUERY SELECT u.id, u.rank, u.sort_ms FROM unnest(page_ids, page_ranks, page_sorts) WITH ORDINALITY AS u(id, rank, sort_ms, n)
                ORDER BY u.n LIMIT page_size;
              RETURN;
            END IF;
            -- The tier is too sparse here: score every match instead.
            IF after_id IS NOT NULL THEN
              start_ms := after_k2;
              start_id := after_id;
            END IF;
          END IF;
        END IF;
        RETURN QUERY
          SELECT m.id, m.rank, m.sort_ms FROM (
            SELECT s.id, ts_rank(s.doc, q) AS rank, s.sort_ms FROM hook_search s WHERE s.doc @@ q OFFSET 0) m
           WHERE (m.rank, m.sort_ms, m.id) < (COALESCE(after_k1, 'Infinity'::real), start_ms, start_id)
           ORDER BY m.rank DESC, m.sort_ms DESC, m.id DESC LIMIT page_size;
      END IF;
    END
    $fn$;

    -- JIT compilation makes these short queries slower; not every role may change it.
    DO $$ BEGIN
      EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
    EXCEPTION WHEN others THEN NULL;
    END $$;
  `)
})
