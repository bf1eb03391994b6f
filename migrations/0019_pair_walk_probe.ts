import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * A two-word search's first walk is a short probe (the structures are described in
 * 0002_catalog_search.ts, the walks in 0014, 0015 and 0017).
 *
 * The first walk for the words side by side read up to half a walk window (5,000 entries at the
 * default) before deciding between walking on and scoring every match. On the benchmark's cold
 * mix most pairs walked are pairs whose tier is rare: the walk found nothing, and scoring their
 * few hundred matches took 2–5 ms after a walk of 5 ms. The first walk is now a twentieth of a
 * window (500 entries). When it sees the tier, the walk goes on as far as the density seen says,
 * as before, but up to three times, since a density seen in 500 entries is rough (the second
 * page of "clear skin" fell 41 hooks short after one such walk and scored 7,608 matches in
 * 80 ms). When it sees no tier hook, it goes on to half a window only when its matches say
 * scoring them all would cost more. The 1,735 two-word phrases among the first 3,000 of the
 * cold mix (1,000,000 hooks, one at a time, the definitions taking turns): first pages 9.3 s
 * with half a window, 6.7 s with the probe; first and second pages 16.5 s and 12.3 s; the
 * fixed pairs of the multi-word row (two pages each, three times) 696 ms and 667 ms.
 * Results and cursors are unchanged.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE OR REPLACE FUNCTION hook_search_page(query text, after_k1 real, after_k2 bigint, after_id text, page_size integer, walk_window integer)
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
      walk_limit bigint;
      walked bigint;
      matched bigint;
      tier_found integer;
      estimated_matches bigint;
      repeaters bigint;
      pair text[];
      adjacent_rank real := ts_rank('a:1 b:2'::tsvector, 'a & b'::tsquery);
      page_ids text[];
      page_sorts bigint[];
      start_ms bigint := 9223372036854775807;
      start_id text := '';
      bound_ms bigint;
      bound_id text;
      walk_rows refcursor;
      walk_ms bigint;
      walk_id text;
      row_id text;
      row_ms bigint;
      row_tier boolean;
      -- Index entries a newest-first walk reads for the cost of one match read from the table:
      -- the walk reads entries in order from one index, sorting matches reads a row each
      -- (measured with the catalog in memory: 0.28 µs an entry, about 2 µs a match).
      entries_per_match constant integer := 8;
      -- The farthest a full-text walk goes.
      longest_walk bigint := 5 * walk_window::bigint;
    BEGIN
      IF after_id IS NOT NULL THEN
        start_ms := after_k2;
        start_id := after_id;
      END IF;

      IF numnode(q) = 0 THEN
        RETURN QUERY SELECT * FROM hook_substring_page(query, after_k2, after_id, page_size, walk_window);
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
        IF got < page_size THEN
          -- Then every hook where it occurs once (all the same rank), newest first: walked when the
          -- walk is expected to fill the page for less than sorting the term's matches would cost,
          -- else sorted from the GIN matches.
          SELECT COALESCE((SELECT hooks FROM hook_search_terms WHERE lexeme = term), 0), c.hooks
            INTO term_hooks, all_hooks FROM catalog_state c;
          walk_limit := greatest(1, least(longest_walk, term_hooks * entries_per_match));
          IF term_hooks * walk_limit < (page_size - got) * all_hooks THEN
            RETURN QUERY
              SELECT m.id, 1::real, m.sort_ms FROM (
                SELECT s.id, s.sort_ms, s.doc FROM hook_search s WHERE s.doc @@ q OFFSET 0) m
               WHERE (m.sort_ms, m.id) < (start_ms, start_id) AND ts_rank(m.doc, q) = single_rank
               ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
          ELSE
            RETURN QUERY
              SELECT w.id, 1::real, w.sort_ms FROM (
                SELECT s.id, s.sort_ms, s.doc FROM hook_search s
                 WHERE (s.sort_ms, s.id) < (start_ms, start_id)
                 ORDER BY s.sort_ms DESC, s.id DESC LIMIT walk_limit) w
               WHERE CASE WHEN w.doc @@ q THEN ts_rank(w.doc, q) = single_rank ELSE false END
               ORDER BY w.sort_ms DESC, w.id DESC LIMIT page_size - got;
            GET DIAGNOSTICS more = ROW_COUNT;
            got := got + more;
            IF got < page_size THEN
              SELECT s.sort_ms, s.id INTO bound_ms, bound_id FROM hook_search s
               WHERE (s.sort_ms, s.id) < (start_ms, start_id)
               ORDER BY s.sort_ms DESC, s.id DESC OFFSET walk_limit - 1 LIMIT 1;
              IF FOUND THEN
                RETURN QUERY
                  SELECT m.id, 1::real, m.sort_ms FROM (
                    SELECT s.id, s.sort_ms, s.doc FROM hook_search s WHERE s.doc @@ q OFFSET 0) m
                   WHERE (m.sort_ms, m.id) < (bound_ms, bound_id) AND ts_rank(m.doc, q) = single_rank
                   ORDER BY m.sort_ms DESC, m.id DESC LIMIT page_size - got;
              END IF;
            END IF;
          END IF;
        END IF;

      ELSE
        -- Two words: every hook where each occurs once and they stand side by side has the same
        -- rank, the highest such hooks can have; only hooks repeating a word rank above it. When
        -- that top tier is common, the page comes from a newest-first walk of the tier plus those
        -- few repeaters, instead of scoring every match. The walk goes first: when it finds the
        -- tier sparse, the repeaters are never looked up.
        IF numnode(q) = 3 THEN
          SELECT array_agg(t.lexeme ORDER BY t.lexeme) INTO pair FROM unnest(to_tsvector('english', query)) t;
        END IF;
        IF array_length(pair, 1) = 2 AND (after_id IS NULL OR after_k1 >= adjacent_rank) THEN
          SELECT c.hooks, COALESCE((SELECT min(t.hooks) FROM hook_search_terms t WHERE t.lexeme = ANY (pair) HAVING count(*) = 2), 0)
            INTO all_hooks, term_hooks FROM catalog_state c;
        END IF;
        -- The tier is at most as common as the rarer word, so even at best a walk reads
        -- page_size * all_hooks / term_hooks entries to fill the page, while scoring every match
        -- costs at most term_hooks matches: when that best walk costs more, the walk is skipped.
        IF array_length(pair, 1) = 2 AND (after_id IS NULL OR after_k1 >= adjacent_rank)
           AND term_hooks * term_hooks * entries_per_match >= page_size::bigint * all_hooks THEN
          IF after_id IS NOT NULL AND after_k1 > adjacent_rank THEN
            start_ms := 9223372036854775807;
            start_id := '';
          END IF;
          -- First a short walk, a probe: as far as filling the page would take if the tier were as
          -- common as the rarer word (it is at most that common), within a twentieth of a window.
          -- If the tier showed up there, on as far as the density seen says, when that costs less
          -- than scoring every match would (up to three times: a density seen in a short walk
          -- is rough); if not, on to half a window when the matches seen say scoring them all
          -- would cost more than that.
          walk_limit := greatest(page_size, least(walk_window / 20, page_size * all_hooks / greatest(term_hooks, 1)));
          walked := 0;
          matched := 0;
          tier_found := 0;
          page_ids := '{}';
          page_sorts := '{}';
          walk_ms := start_ms;
          walk_id := start_id;
          FOR pass IN 1..4 LOOP
            -- The walk's matches, newest first, read one at a time: it stops at the tier hook that
            -- fills the page. A next pass goes on from the last match read (the entries after it,
            -- up to where this walk ended, are read again: fewer than reading where it ended).
            OPEN walk_rows FOR
              SELECT v.id, v.sort_ms, ts_rank(v.doc, q) = adjacent_rank FROM (
                SELECT s.id, s.sort_ms, s.doc FROM hook_search s
                 WHERE (s.sort_ms, s.id) < (walk_ms, walk_id)
                 ORDER BY s.sort_ms DESC, s.id DESC LIMIT walk_limit - walked) v
               WHERE v.doc @@ q
               ORDER BY v.sort_ms DESC, v.id DESC;
            LOOP
              FETCH walk_rows INTO row_id, row_ms, row_tier;
              EXIT WHEN NOT FOUND;
              matched := matched + 1;
              walk_ms := row_ms;
              walk_id := row_id;
              IF row_tier THEN
                tier_found := tier_found + 1;
                page_ids := page_ids || row_id;
                page_sorts := page_sorts || row_ms;
                EXIT WHEN tier_found >= page_size;
              END IF;
            END LOOP;
            CLOSE walk_rows;
            EXIT WHEN tier_found >= page_size OR pass = 4;
            walked := walk_limit;
            estimated_matches := matched * all_hooks / walked;
            IF tier_found = 0 THEN
              -- No tier hook in the probe: on to half a window only when scoring every match
              -- would cost more than that walk (a tier can be dense and still miss 500 entries).
              EXIT WHEN walked >= walk_window / 2 OR estimated_matches * entries_per_match <= walk_window / 2 - walked;
              walk_limit := walk_window / 2;
            ELSE
              walk_limit := walked * page_size * 3 / (2 * tier_found);
              EXIT WHEN walk_limit > longest_walk OR walk_limit - walked > estimated_matches * entries_per_match;
            END IF;
          END LOOP;
          -- Hooks repeating a word may rank above the tier: each costs a lookup, so they are scored
          -- one by one only when they are fewer than the matches.
          IF tier_found >= page_size THEN
            SELECT count(*) INTO repeaters FROM (
              SELECT 1 FROM hook_search_repeats r WHERE r.lexeme = ANY (pair) LIMIT walk_window / 5 + 1) x;
            IF repeaters > 0 AND repeaters <= walk_window / 5 THEN
              -- The walk's length, for the density of matches: counted only now that it matters.
              SELECT count(*) INTO walked FROM hook_search s
               WHERE (s.sort_ms, s.id) < (start_ms, start_id) AND (s.sort_ms, s.id) >= (page_sorts[tier_found], page_ids[tier_found]);
            END IF;
            IF repeaters = 0 OR (repeaters <= walk_window / 5 AND repeaters * 4 <= matched * all_hooks / greatest(walked, 1)) THEN
              RETURN QUERY
                SELECT p.id, p.rank, p.sort_ms FROM (
                  (SELECT a.id, a.rank, a.sort_ms FROM (
                     SELECT h.id, ts_rank(h.doc, q) AS rank, h.sort_ms
                       FROM (SELECT DISTINCT r.id FROM hook_search_repeats r WHERE r.lexeme = ANY (pair)) c,
                            LATERAL (SELECT s.id, s.doc, s.sort_ms FROM hook_search s WHERE s.id = c.id OFFSET 0) h
                      WHERE h.doc @@ q) a
                    WHERE a.rank > adjacent_rank
                      AND (a.rank, a.sort_ms, a.id) < (COALESCE(after_k1, 'Infinity'::real), COALESCE(after_k2, 9223372036854775807), COALESCE(after_id, ''))
                    ORDER BY a.rank DESC, a.sort_ms DESC, a.id DESC LIMIT page_size)
                  UNION ALL
                  SELECT u.id, adjacent_rank, u.sort_ms FROM unnest(page_ids, page_sorts) AS u(id, sort_ms)
                ) p
                ORDER BY p.rank DESC, p.sort_ms DESC, p.id DESC LIMIT page_size;
              RETURN;
            END IF;
          END IF;
          -- The tier is too sparse here, or too many hooks repeat a word: score every match instead.
          IF after_id IS NOT NULL THEN
            start_ms := after_k2;
            start_id := after_id;
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
  `)
})
