import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The catalog hooks nearest to a line of text, in one statement (src/Hooks/NeighbourRule.ts
 * states the rule; src/Hooks/RepoMemory.ts follows it in memory).
 *
 * `hook_neighbours(line_lexemes, wanted, rare_budget, common_sample, walk_window)` answers the
 * `wanted` best hooks as (id, score, sort_ms), best first, ties newest then id, like search.
 * - A lexeme weighs r², r = ln(1 + (N - n + 0.5) / (n + 0.5)), N the catalog's hooks and n those
 *   holding it (hook_search_terms): the rarer, the heavier. A hook's score is the weight of the line's
 *   lexemes it holds over the weight of all of them (0..1). Weights and sums are float8, added in
 *   the order the lexemes are ranked (fewest hooks first, then byte order), so the memory twin
 *   computes the very same numbers.
 * - Candidates, so no line scores a million rows: the line's lexemes rarest first while the hooks
 *   holding them add up to at most rare_budget ("rare"): every hook holding one of them; and for
 *   the lexemes left ("common"), the common_sample newest hooks holding one of them. Those are
 *   found by walking the newest entries (index-only, at most ten walk_windows); when the words
 *   are too rare for that, or the walk falls short, by their index matches sorted. Either way it
 *   is the same set, so walk_window changes speed only, never answers.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    CREATE FUNCTION hook_neighbours(line_lexemes text[], wanted integer, rare_budget integer, common_sample integer, walk_window integer)
    RETURNS TABLE (id text, score double precision, sort_ms bigint)
    LANGUAGE plpgsql STABLE
    SET max_parallel_workers_per_gather = 0
    AS $fn$
    DECLARE
      all_hooks bigint;
      lexemes text[] := '{}';
      weights double precision[] := '{}';
      total double precision;
      rare text[] := '{}';
      common text[] := '{}';
      rare_hooks bigint := 0;
      common_hooks bigint := 0;
      rq tsquery;
      cq tsquery;
      common_ids text[] := '{}';
      term record;
      rarity double precision;
      walk_limit bigint;
    BEGIN
      SELECT c.hooks INTO all_hooks FROM catalog_state c;
      FOR term IN
        SELECT l.lexeme, COALESCE(t.hooks, 0) AS hooks
          FROM (SELECT DISTINCT u.lexeme FROM unnest(line_lexemes) u(lexeme)) l
          LEFT JOIN hook_search_terms t ON t.lexeme = l.lexeme
         ORDER BY 2, l.lexeme COLLATE "C"
      LOOP
        lexemes := lexemes || term.lexeme;
        rarity := ln(1 + (all_hooks - term.hooks + 0.5::float8) / (term.hooks + 0.5::float8));
        weights := weights || rarity * rarity;
        IF term.hooks = 0 THEN
          CONTINUE;
        ELSIF common = '{}' AND rare_hooks + term.hooks <= rare_budget THEN
          rare := rare || term.lexeme;
          rare_hooks := rare_hooks + term.hooks;
        ELSE
          common := common || term.lexeme;
          common_hooks := common_hooks + term.hooks;
        END IF;
      END LOOP;
      IF rare = '{}' AND common = '{}' THEN
        RETURN;
      END IF;
      SELECT sum(w) INTO total FROM unnest(weights) w;
      IF rare <> '{}' THEN
        rq := array_to_string(ARRAY(SELECT quote_literal(x) FROM unnest(rare) x), ' | ')::tsquery;
      END IF;
      IF common <> '{}' THEN
        cq := array_to_string(ARRAY(SELECT quote_literal(x) FROM unnest(common) x), ' | ')::tsquery;
        -- Walking the newest entries finds the sample after about common_sample * all_hooks / n
        -- entries (n the hooks holding a common lexeme): walk four times that, when it is at most
        -- ten windows; the matches sorted instead when the words are too rare for that, or the
        -- walk fell short.
        walk_limit := least(all_hooks, greatest(walk_window::bigint, 4 * common_sample::bigint * all_hooks / common_hooks));
        IF walk_limit <= 10 * walk_window::bigint THEN
          common_ids := ARRAY(
            SELECT w.id FROM (
              SELECT s.id, s.sort_ms, s.doc FROM hook_search s ORDER BY s.sort_ms DESC, s.id DESC LIMIT walk_limit) w
             WHERE w.doc @@ cq
             ORDER BY w.sort_ms DESC, w.id DESC LIMIT common_sample);
        END IF;
        IF cardinality(common_ids) < common_sample AND NOT (walk_limit = all_hooks AND walk_limit <= 10 * walk_window::bigint) THEN
          common_ids := ARRAY(
            SELECT m.id FROM (SELECT s.id, s.sort_ms FROM hook_search s WHERE s.doc @@ cq OFFSET 0) m
             ORDER BY m.sort_ms DESC, m.id DESC LIMIT common_sample);
        END IF;
      END IF;
      RETURN QUERY
        SELECT c.id, (SELECT sum(x.w) FROM unnest(lexemes, weights) x(l, w) WHERE x.l = ANY (tsvector_to_array(c.doc))) / total AS score, c.sort_ms
          FROM (SELECT s.id, s.sort_ms, s.doc FROM hook_search s WHERE s.doc @@ rq
                UNION ALL
                SELECT s.id, s.sort_ms, s.doc FROM hook_search s WHERE s.id = ANY (common_ids) AND NOT COALESCE(s.doc @@ rq, false)) c
         ORDER BY 2 DESC, c.sort_ms DESC, c.id DESC
         LIMIT wanted;
    END
    $fn$;
  `)
})
