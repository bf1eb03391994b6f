/**
 * The catalog hooks nearest to a hook line read on screen, and the category they point to.
 *
 * Ranking: one query to the catalog ranks its hooks by how much of the line they share, the
 * line's words weighted by how rare they are in the catalog (src/Hooks/NeighbourRule.ts has the
 * rule; docs/behaviour.md says it for users). The first SIMILAR_SHOWN are the similar hooks, each
 * with its score: the share of the line's weighted words it holds, 0..1. The list is empty only
 * when no catalog hook holds a word of the line.
 *
 * Category rule, from the same ranked hooks (the first RANKED_CONSIDERED): each word of the line
 * that some of them hold points to the category of at least WORD_CATEGORY_SHARE of those hooks
 * ("squat", "toddler", "sourdough"); a word spread over several categories ("ten", "minutes",
 * "cheapest") points nowhere. The category most words point to is the clip's. When no word
 * points anywhere, or two categories get as many words, the first SCORE_VOTERS ranked hooks
 * decide: the category whose hooks' scores add up to most. None when that ties too, or no ranked
 * hook has a category.
 */
import { Effect, Option } from "effect"
import { lexemesOf } from "../Hooks/EnglishLexemes.js"
import { HookCatalog } from "../Hooks/HookCatalog.js"
import { MAX_LINE_LEXEMES, type NeighbourRow } from "../Hooks/NeighbourRule.js"

export type SimilarHook = NeighbourRow

export interface Neighbours {
  /** The nearest hooks, nearest first (at most SIMILAR_SHOWN). */
  readonly similar: ReadonlyArray<SimilarHook>
  readonly category: { readonly slug: string } | null
}

export const SIMILAR_SHOWN = 3
/** Ranked hooks the category rule reads. */
export const RANKED_CONSIDERED = 40
/** Share of the ranked hooks holding a word that puts the word in their category. */
export const WORD_CATEGORY_SHARE = 0.5
/** Ranked hooks whose scores settle the category when the words do not. */
export const SCORE_VOTERS = 20

/** The category with the largest total, or none when there is none or two share it. */
const leader = (totals: ReadonlyMap<string, number>) => {
  const ranked = [...totals].sort((a, b) => b[1] - a[1])
  if (ranked.length === 0 || ranked[1]?.[1] === ranked[0][1]) return null
  return { slug: ranked[0][0] }
}

const add = (totals: Map<string, number>, slug: string, amount: number) => totals.set(slug, (totals.get(slug) ?? 0) + amount)

/** The category rule (see the top of this file), given the line's lexemes and its ranked hooks. */
export const categoryOf = (lineLexemes: ReadonlyArray<string>, ranked: ReadonlyArray<NeighbourRow>) => {
  const considered = ranked.slice(0, RANKED_CONSIDERED).map((hook) => ({ ...hook, lexemes: new Set(lexemesOf(hook.text)) }))
  const wordVotes = new Map<string, number>()
  for (const lexeme of new Set(lineLexemes)) {
    const holding = considered.filter((hook) => hook.lexemes.has(lexeme))
    const counts = new Map<string, number>()
    for (const hook of holding) if (hook.category !== null) add(counts, hook.category, 1)
    for (const [slug, count] of counts) if (count >= WORD_CATEGORY_SHARE * holding.length) add(wordVotes, slug, 1)
  }
  const byWords = leader(wordVotes)
  if (byWords !== null) return byWords
  const scoreVotes = new Map<string, number>()
  for (const hook of ranked.slice(0, SCORE_VOTERS)) if (hook.category !== null) add(scoreVotes, hook.category, hook.score)
  return leader(scoreVotes)
}

const none: Neighbours = { similar: [], category: null }

/** A score as answered: three significant digits. */
const shown = (score: number) => Number(score.toPrecision(3))

/** The neighbours of a line given the catalog's ranking (the catalog's, or a test's). */
export const neighboursBy = <E>(
  rank: (lexemes: ReadonlyArray<string>, rows: number) => Effect.Effect<ReadonlyArray<NeighbourRow>, E>,
  text: string
): Effect.Effect<Neighbours, E> =>
  Effect.gen(function*() {
    const lexemes = lexemesOf(text).slice(0, MAX_LINE_LEXEMES)
    if (lexemes.length === 0) return none
    const ranked = yield* rank(lexemes, RANKED_CONSIDERED)
    return {
      similar: ranked.slice(0, SIMILAR_SHOWN).map(({ category, id, score, text }) => ({ id, text, category, score: shown(score) })),
      category: categoryOf(lexemes, ranked)
    }
  })

/**
 * The neighbours of a hook line in the catalog of the server the clip is scored in (the workers
 * run with it); none where the scorer runs without a catalog, or when the query fails.
 */
export const findNeighbours = (text: string): Effect.Effect<Neighbours> =>
  Effect.gen(function*() {
    const catalog = yield* Effect.serviceOption(HookCatalog)
    if (Option.isNone(catalog)) return none
    return yield* neighboursBy(catalog.value.neighbours, text)
  }).pipe(
    Effect.catch((error) => Effect.as(Effect.logWarning("the catalog could not be consulted for a clip's hook", error), none)),
    Effect.catchDefect((defect) => Effect.as(Effect.logWarning("the catalog could not be consulted for a clip's hook", defect), none)),
    Effect.withSpan("HookNeighbours.find")
  )
