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
 *
 * `hook_search_page` changes for two words in two ways (the walks before are described in 0014,
 * 0015, 0017 and 0019).
 *
 * A phrase with a stop word between its two words ("wish i knew") matches hooks where they stand
 * one word apart, and its side-by-side tier is empty or nearly so: it scored every match, 110-190
 * ms for 23,000-28,000 of them. When the query's words are one apart and the side-by-side index
 * (0021) finds at most a page of hooks with them side by side, those hooks are scored with the
 * repeaters and the walk fills the page from the tier one word apart.
 *
 * And a two-word search walks the rarer word's postings instead of the whole catalog, newest first.
 * The top tier of a two-word query (each word once, side by side, or one word apart) holds the
 * rarer word once in every hook, so its hooks are all among that word's postings of one
 * occurrence. The walk read the newest hooks of the whole catalog, cheap per entry but long for a
 * tier that is common among the rarer word's hooks and rare in the catalog ("gut health": 2,457
 * matches, nearly all side by side, in a quarter of a percent of the hooks): past its window it
 * scored every match, 32 ms. Walking the rarer word's postings costs a tsvector lookup per entry,
 * about what scoring a match costs, and finds such a tier in about a page of entries. The probe is
 * now a page of entries; the walk goes on while the rest of it, at the density of the tier seen,
 * reads fewer entries than there are matches to score. A pair whose rarer word is in fewer than
 * four pages' worth of hooks scores its matches at once.
 *
 * A hook repeating a word that ranks exactly as the tier is now kept in the page once, from either
 * list. Results and cursors are unchanged.
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
      -- The rarer of a pair's two words: a two-word walk reads its postings.
      rarer text;
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
      -- The pair as the side-by-side index lists it.
      pair_token text;
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
      row_match boolean;
      row_tier boolean;
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
          SELECT COALESCE((SELECT min(t.hooks) FROM hook_search_terms t WHERE t.lexeme = ANY (pair) HAVING count(*) = 2), 0),
                 (SELECT t.lexeme FROM hook_search_terms t WHERE t.lexeme = ANY (pair) ORDER BY t.hooks, t.lexeme LIMIT 1)
            INTO term_hooks, rarer;
          pair_token := pair[1] || ' ' || pair[2];
          -- A phrase with a stop word between its two words ("wish i knew") matches hooks where
          -- they stand one word apart: when the hooks with them side by side (the only hooks of
          -- one occurrence each that rank higher) are few, they are looked up in the side-by-side
          -- index and the walk fills the page from the tier one word apart instead, where the
          -- side-by-side tier could never fill it and every match would be scored.
          IF query_gap = 2 AND term_hooks >= 4 * page_size THEN
            SELECT count(*) INTO side_by_side FROM (
              SELECT 1 FROM hook_search s WHERE hook_search_side_by_side(s.doc) @> ARRAY[pair_token] LIMIT page_size + 1) x;
            IF side_by_side <= page_size THEN
              tier_rank := one_apart_rank;
            END IF;
          END IF;
        END IF;
        -- Every tier hook holds the rarer word once, so the walk reads the rarer word's postings of
        -- one occurrence, newest first, and looks each hook's tsvector up: a lookup per entry, about
        -- what scoring a match costs. When the rarer word is in fewer than four pages' worth of
        -- hooks, scoring its few matches costs no more than the shortest walk: no walk.
        IF array_length(pair, 1) = 2 AND (after_id IS NULL OR after_k1 >= tier_rank)
           AND term_hooks >= 4 * page_size THEN
          IF after_id IS NOT NULL AND after_k1 > tier_rank THEN
            start_ms := 9223372036854775807;
            start_id := '';
          END IF;
          -- First a short walk, a probe of a page of entries; then on as far as the density of the
          -- tier seen says, when the rest of that walk reads fewer entries than there are matches to
          -- score.
          walk_limit := page_size;
          walked := 0;
          matched := 0;
          tier_found := 0;
          page_ids := '{}';
          page_sorts := '{}';
          walk_ms := start_ms;
          walk_id := start_id;
          FOR pass IN 1..8 LOOP
            -- The walk's entries, newest first, read one at a time: it stops at the tier hook that
            -- fills the page, and a next pass goes on from the last entry read.
            OPEN walk_rows FOR
              SELECT p.id, p.sort_ms, s.doc @@ q, CASE WHEN s.doc @@ q THEN ts_rank(s.doc, q) = tier_rank ELSE false END
                FROM (SELECT r.id, r.sort_ms FROM hook_search_postings r
                       WHERE r.lexeme = rarer AND r.occurrences = 1 AND (r.sort_ms, r.id) < (walk_ms, walk_id)
                       ORDER BY r.sort_ms DESC, r.id DESC LIMIT walk_limit - walked) p,
                     LATERAL (SELECT h.doc FROM hook_search h WHERE h.sort_ms = p.sort_ms AND h.id = p.id) s
               ORDER BY p.sort_ms DESC, p.id DESC;
            LOOP
              FETCH walk_rows INTO row_id, row_ms, row_match, row_tier;
              EXIT WHEN NOT FOUND;
              walked := walked + 1;
              walk_ms := row_ms;
              walk_id := row_id;
              IF row_match THEN
                matched := matched + 1;
              END IF;
              IF row_tier THEN
                tier_found := tier_found + 1;
                page_ids := page_ids || row_id;
                page_sorts := page_sorts || row_ms;
                EXIT WHEN tier_found >= page_size;
              END IF;
            END LOOP;
            CLOSE walk_rows;
            -- Filled, or every posting read (the tier holds fewer than a page), or out of passes.
            EXIT WHEN tier_found >= page_size OR walked < walk_limit OR pass = 8;
            -- The entries still to read at the density seen, counting one tier hook fewer (a few
            -- hooks in a short walk say little) and half as many again: on only while that reads
            -- fewer entries than there are matches to score.
            EXIT WHEN tier_found <= 1;
            estimated_matches := matched * term_hooks / walked;
            walk_limit := walked + (page_size - tier_found) * walked * 3 / (2 * (tier_found - 1));
            EXIT WHEN walk_limit > longest_walk OR walk_limit - walked > estimated_matches;
            walk_limit := least(walk_limit, term_hooks);
            EXIT WHEN walk_limit <= walked;
          END LOOP;
          -- Hooks repeating a word may rank above the tier (and, for the tier one word apart, the
          -- few side by side do): each costs a lookup, so they are scored one by one only when they
          -- are fewer than the matches.
          IF tier_found >= page_size THEN
            SELECT count(*) INTO repeaters FROM (
              SELECT 1 FROM hook_search_postings r WHERE r.lexeme = ANY (pair) AND r.occurrences >= 2 LIMIT walk_window / 5 + 1) x;
            IF repeaters = 0 OR (repeaters <= walk_window / 5 AND repeaters * 4 <= matched * term_hooks / greatest(walked, 1)) THEN
              RETURN QUERY
                SELECT p.id, p.rank, p.sort_ms FROM (
                  (SELECT a.id, a.rank, a.sort_ms FROM (
                     SELECT h.id, ts_rank(h.doc, q) AS rank, h.sort_ms
                       FROM (SELECT r.id FROM hook_search_postings r WHERE r.lexeme = ANY (pair) AND r.occurrences >= 2
                              UNION
                              SELECT s.id FROM hook_search s
                               WHERE tier_rank < adjacent_rank AND hook_search_side_by_side(s.doc) @> ARRAY[pair_token]) c,
                            LATERAL (SELECT s.id, s.doc, s.sort_ms FROM hook_search s WHERE s.id = c.id OFFSET 0) h
                      WHERE h.doc @@ q) a
                    WHERE a.rank >= tier_rank
                      AND (a.rank, a.sort_ms, a.id) < (COALESCE(after_k1, 'Infinity'::real), COALESCE(after_k2, 9223372036854775807), COALESCE(after_id, ''))
                    ORDER BY a.rank DESC, a.sort_ms DESC, a.id DESC LIMIT page_size)
                  -- A repeater can rank exactly as the tier, and be in both lists: UNION keeps it once.
                  UNION
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
