import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Every (term, hook) pair is a posting, in rank order: a one-word search is one index range.
 *
 * `hook_search_repeats` held the pairs where the term occurs more than once; a one-word search
 * took its top tier from there and found the rest, the hooks where the term occurs once, by a
 * newest-first walk (common words) or by sorting the term's GIN matches (rarer words), reading a
 * table row per match. Words in 1,000 to 10,000 of 1,000,000 hooks cost 8-15 ms a page that way,
 * and one-word pages were about a third of the search function's time on the benchmark's cold
 * mix. `hook_search_postings` holds every pair, with the term's occurrences and the hook's sort
 * key, under one index in the order a one-word search answers (occurrences, then newest, then
 * id): a page is the next `page_size` entries of the term's range, whatever the word. The price:
 * one posting per distinct term of a hook (5.3 postings a hook in the benchmark's catalog).
 *
 * The two-word search reads the repeaters (occurrences >= 2) from the same index. A posting is
 * removed by its whole key, computed from the hook's previous tsvector, so no second index is
 * kept for removal by hook id.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE TABLE hook_search_postings (
      lexeme       text NOT NULL,
      occurrences  integer NOT NULL,
      sort_ms      bigint NOT NULL,
      id           text NOT NULL
    );
    INSERT INTO hook_search_postings (lexeme, occurrences, sort_ms, id)
    SELECT t.lexeme, COALESCE(array_length(t.positions, 1), 1), s.sort_ms, s.id
      FROM hook_search s, unnest(s.doc) t
     ORDER BY 1, 2 DESC, 3 DESC, 4 DESC;
    CREATE UNIQUE INDEX hook_search_postings_rank ON hook_search_postings (lexeme, occurrences DESC, sort_ms DESC, id DESC);

    -- The postings of the given hooks, from their tsvectors as stored now.
    CREATE FUNCTION hook_search_postings_of(hook_ids text[]) RETURNS TABLE (lexeme text, occurrences integer, sort_ms bigint, id text)
    LANGUAGE sql STABLE AS $fn$
      SELECT t.lexeme, COALESCE(array_length(t.positions, 1), 1), s.sort_ms, s.id
        FROM hook_search s, unnest(s.doc) t
       WHERE s.id = ANY (hook_ids);
    $fn$;

    CREATE OR REPLACE FUNCTION hook_search_upsert_from(changed_ids text[]) RETURNS void LANGUAGE sql AS $fn$
      SELECT hook_search_count_terms(ARRAY(SELECT s.doc FROM hook_search s WHERE s.id = ANY (changed_ids)), -1);
      DELETE FROM hook_search_postings p USING hook_search_postings_of(changed_ids) o
       WHERE (p.lexeme, p.occurrences, p.sort_ms, p.id) = (o.lexeme, o.occurrences, o.sort_ms, o.id);
      UPDATE catalog_state SET hooks = hooks + (
        SELECT count(*) FROM unnest(changed_ids) c WHERE NOT EXISTS (SELECT 1 FROM hook_search s WHERE s.id = c));
      INSERT INTO hook_search (id, sort_ms, category, doc, folded)
      SELECT h.id,
             COALESCE(floor(extract(epoch FROM h.published_at) * 1000)::bigint, -9000000000000000),
             h.category, to_tsvector('english', h.text), lower(h.text)
        FROM hooks h WHERE h.id = ANY (changed_ids)
      ON CONFLICT (id) DO UPDATE
        SET sort_ms = EXCLUDED.sort_ms, category = EXCLUDED.category, doc = EXCLUDED.doc, folded = EXCLUDED.folded;
      -- In index order: a large import then appends to the index's pages instead of scattering.
      INSERT INTO hook_search_postings (lexeme, occurrences, sort_ms, id)
      SELECT o.lexeme, o.occurrences, o.sort_ms, o.id FROM hook_search_postings_of(changed_ids) o
       ORDER BY 1, 2 DESC, 3 DESC, 4 DESC;
      SELECT hook_search_count_terms(ARRAY(SELECT s.doc FROM hook_search s WHERE s.id = ANY (changed_ids)), 1);
      UPDATE catalog_state SET version = version + 1;
    $fn$;

    CREATE OR REPLACE FUNCTION hook_search_remove(removed_ids text[]) RETURNS void LANGUAGE sql AS $fn$
      SELECT hook_search_count_terms(ARRAY(SELECT s.doc FROM hook_search s WHERE s.id = ANY (removed_ids)), -1);
      DELETE FROM hook_search_postings p USING hook_search_postings_of(removed_ids) o
       WHERE (p.lexeme, p.occurrences, p.sort_ms, p.id) = (o.lexeme, o.occurrences, o.sort_ms, o.id);
      UPDATE catalog_state SET hooks = hooks - (SELECT count(*) FROM hook_search s WHERE s.id = ANY (removed_ids));
      DELETE FROM hook_search WHERE id = ANY (removed_ids);
      UPDATE catalog_state SET version = version + 1;
    $fn$;

    CREATE OR REPLACE FUNCTION hook_search_after_truncate() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      TRUNCATE hook_search, hook_search_postings, hook_search_terms;
      UPDATE catalog_state SET version = version + 1, hooks = 0;
      RETURN NULL;
    END
    $fn$;

    DROP TABLE hook_search_repeats;

    CREATE OR REPLACE FUNCTION hook_search_page(query text, after_k1 real, after_k2 bigint, after_id text, page_size integer, walk_window integer)
    RETURNS TABLE (id text, k1 real, k2 bigint)
    LANGUAGE plpgsql STABLE
    SET max_parallel_workers_per_gather = 0
    SET effective_io_concurrency = 0
    AS $fn$
    DECLARE
      q tsquery := plainto_tsquery('english', query);
      term text;
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
      one_apart_rank real := ts_rank('a:1 b:3'::tsvector, 'a & b'::tsquery);
      -- The rank of the tier a walk fills the page from: the words side by side, or one word apart.
      tier_rank real := adjacent_rank;
      query_gap integer;
      side_by_side integer;
      page_ids text[];
      page_sorts bigint[];
      start_ms bigint := 9223372036854775807;
      start_id text := '';
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
        -- ts_rank of one term grows with its occurrences: the term's postings in rank order are the page.
        RETURN QUERY
          SELECT p.id, p.occurrences::real, p.sort_ms FROM hook_search_postings p
           WHERE p.lexeme = term
             AND (p.occurrences, p.sort_ms, p.id) < (COALESCE(after_k1::integer, 2147483647), start_ms, start_id)
           ORDER BY p.occurrences DESC, p.sort_ms DESC, p.id DESC LIMIT page_size;

      ELSE
        -- Two words: every hook where each occurs once and they stand side by side has the same
        -- rank, the highest such hooks can have; only hooks repeating a word rank above it. When
        -- that top tier is common, the page comes from a newest-first walk of the tier plus those
        -- few repeaters, instead of scoring every match. The walk goes first: when it finds the
        -- tier sparse, the repeaters are never looked up.
        IF numnode(q) = 3 THEN
          SELECT array_agg(t.lexeme ORDER BY t.lexeme), max(t.positions[1]) - min(t.positions[1])
            INTO pair, query_gap FROM unnest(to_tsvector('english', query)) t;
        END IF;
        IF array_length(pair, 1) = 2 THEN
          SELECT c.hooks, COALESCE((SELECT min(t.hooks) FROM hook_search_terms t WHERE t.lexeme = ANY (pair) HAVING count(*) = 2), 0)
            INTO all_hooks, term_hooks FROM catalog_state c;
          -- A phrase with a stop word between its two words ("wish i knew") matches hooks where
          -- they stand one word apart: when the hooks with them side by side (the only hooks of
          -- one occurrence each that rank higher) are few, they are looked up in the side-by-side
          -- index and the walk fills the page from the tier one word apart instead, where the
          -- side-by-side tier could never fill it and every match would be scored.
          IF query_gap = 2 AND term_hooks * term_hooks * entries_per_match >= page_size::bigint * all_hooks THEN
            SELECT count(*) INTO side_by_side FROM (
              SELECT 1 FROM hook_search s WHERE hook_search_side_by_side(s.doc) @> ARRAY[pair[1] || ' ' || pair[2]] LIMIT page_size + 1) x;
            IF side_by_side <= page_size THEN
              tier_rank := one_apart_rank;
            END IF;
          END IF;
        END IF;
        -- The tier is at most as common as the rarer word, so even at best a walk reads
        -- page_size * all_hooks / term_hooks entries to fill the page, while scoring every match
        -- costs at most term_hooks matches: when that best walk costs more, the walk is skipped.
        IF array_length(pair, 1) = 2 AND (after_id IS NULL OR after_k1 >= tier_rank)
           AND term_hooks * term_hooks * entries_per_match >= page_size::bigint * all_hooks THEN
          IF after_id IS NOT NULL AND after_k1 > tier_rank THEN
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
              SELECT v.id, v.sort_ms, ts_rank(v.doc, q) = tier_rank FROM (
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
          -- Hooks repeating a word may rank above the tier (and, for the tier one word apart, the
          -- few side by side do): each costs a lookup, so they are scored one by one only when they
          -- are fewer than the matches.
          IF tier_found >= page_size THEN
            SELECT count(*) INTO repeaters FROM (
              SELECT 1 FROM hook_search_postings r WHERE r.lexeme = ANY (pair) AND r.occurrences >= 2 LIMIT walk_window / 5 + 1) x;
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
                       FROM (SELECT r.id FROM hook_search_postings r WHERE r.lexeme = ANY (pair) AND r.occurrences >= 2
                              UNION
                              SELECT s.id FROM hook_search s
                               WHERE tier_rank < adjacent_rank AND hook_search_side_by_side(s.doc) @> ARRAY[pair[1] || ' ' || pair[2]]) c,
                            LATERAL (SELECT s.id, s.doc, s.sort_ms FROM hook_search s WHERE s.id = c.id OFFSET 0) h
                      WHERE h.doc @@ q) a
                    WHERE a.rank > tier_rank
                      AND (a.rank, a.sort_ms, a.id) < (COALESCE(after_k1, 'Infinity'::real), COALESCE(after_k2, 9223372036854775807), COALESCE(after_id, ''))
                    ORDER BY a.rank DESC, a.sort_ms DESC, a.id DESC LIMIT page_size)
                  UNION ALL
                  SELECT u.id, tier_rank, u.sort_ms FROM unnest(page_ids, page_sorts) AS u(id, sort_ms)
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
