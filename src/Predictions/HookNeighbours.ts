/**
 * The catalog hooks nearest to a hook line read on screen, and the category they agree on.
 *
 * Ranking, with the catalog's own search: each distinct content word of the line (stop words and
 * one-letter words left out, at most MAX_QUERY_WORDS) is searched on its own, and every hook on
 * a word's first page is a candidate. A word too common for one page (its page says there is
 * more) is then searched together with each other such word (the search matches hooks holding
 * both, at most MAX_PAIRS pairs): a hook sharing two common words with the line is on that pair's
 * first page even when it is on neither word's. A word weighs 1 / log2(2 + hooks on its first
 * page), so a rare word counts for more than a common one. A candidate scores the sum of the weights of the
 * line's words it contains; it must share at least two of them (one when the line has only
 * one). Ties go to the shorter hook, then the smaller id: the same line and catalog always give
 * the same neighbours.
 *
 * Category rule, from the same hooks: a word whose first page holds at least WORD_CATEGORY_SHARE
 * of hooks of one category is a word of that category ("vitamins", "potty training"), and votes
 * for it; words spread over many categories ("stop", "tips", a city) do not vote. The category
 * with the most votes is the clip's; none when no word votes or two categories tie.
 */
import { Effect, Option } from "effect"
import { HookCatalog } from "../Hooks/HookCatalog.js"
import { wordsOf } from "./HookText.js"

export interface SimilarHook {
  readonly id: string
  readonly text: string
  readonly category: string | null
}

export interface Neighbours {
  /** The nearest hooks, nearest first (at most SIMILAR_SHOWN). */
  readonly similar: ReadonlyArray<SimilarHook>
  readonly category: { readonly slug: string } | null
}

export const MAX_QUERY_WORDS = 10
/** Pairs of common words searched together, at most (the pairs of the first five common words). */
export const MAX_PAIRS = 10
/** Share of a word's hooks in one category that makes it a word of that category (more than half: one category at most). */
export const WORD_CATEGORY_SHARE = 0.6
export const SIMILAR_SHOWN = 3

const stopWords = new Set(
  ("a an and are as at be but by can do does for from had has have he her his how i if in into is it its " +
    "just me my no not of on or our she so than that the their them then there these they this to too up " +
    "us was we were what when where which who why will with you your i'm it's you're don't")
    .split(" ")
)

/** The words of a line that are searched: distinct, in order, without stop words. */
export const queryWords = (text: string): ReadonlyArray<string> =>
  [...new Set(wordsOf(text).filter((word) => word.length > 1 && !stopWords.has(word)))].slice(0, MAX_QUERY_WORDS)

interface Candidate extends SimilarHook {
  score: number
  shared: number
  readonly length: number
}

/**
 * Ranks the hooks found for each word (pages in `queryWords` order), and those found for pairs of
 * words, against the line's words.
 */
export const rankNeighbours = (
  words: ReadonlyArray<string>,
  pages: ReadonlyArray<ReadonlyArray<SimilarHook>>,
  pairHooks: ReadonlyArray<SimilarHook> = []
): ReadonlyArray<Candidate> => {
  const weights = new Map(words.map((word, i) => [word, 1 / Math.log2(2 + (pages[i]?.length ?? 0))]))
  const candidates = new Map<string, Candidate>()
  for (const hook of [...pages.flat(), ...pairHooks]) {
    if (candidates.has(hook.id)) continue
    const hookWords = new Set(wordsOf(hook.text))
    const candidate: Candidate = { ...hook, score: 0, shared: 0, length: hook.text.length }
    for (const [word, weight] of weights) {
      if (!hookWords.has(word)) continue
      candidate.score += weight
      candidate.shared += 1
    }
    candidates.set(hook.id, candidate)
  }
  const needed = Math.min(2, words.length)
  return [...candidates.values()]
    .filter((candidate) => candidate.shared >= needed && candidate.score > 0)
    .sort((a, b) => b.score - a.score || a.length - b.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
}

/** The category rule (see the top of this file), given the hooks each word found. */
export const agreedCategory = (pages: ReadonlyArray<ReadonlyArray<{ readonly category: string | null }>>) => {
  const votes = new Map<string, number>()
  for (const page of pages) {
    const counts = new Map<string, number>()
    for (const hook of page) if (hook.category !== null) counts.set(hook.category, (counts.get(hook.category) ?? 0) + 1)
    for (const [slug, count] of counts) if (count >= WORD_CATEGORY_SHARE * page.length) votes.set(slug, (votes.get(slug) ?? 0) + 1)
  }
  const ranked = [...votes].sort((a, b) => b[1] - a[1])
  if (ranked.length === 0 || ranked[1]?.[1] === ranked[0][1]) return null
  return { slug: ranked[0][0] }
}

const none: Neighbours = { similar: [], category: null }

/** One first page of the catalog's search: its hooks, and whether the query matches more. */
export interface SearchPage {
  readonly hooks: ReadonlyArray<SimilarHook>
  readonly more: boolean
}

/** Pairs of the words whose own page was not all of their hooks, each pair searched as one query. */
export const commonPairs = (words: ReadonlyArray<string>, pages: ReadonlyArray<SearchPage>) => {
  const common = words.filter((_, i) => pages[i]?.more === true)
  return common.flatMap((first, i) => common.slice(i + 1).map((second) => `${first} ${second}`)).slice(0, MAX_PAIRS)
}

/** The neighbours of a line given a search (the catalog's, or a test's). */
export const neighboursBy = <E>(search: (query: string) => Effect.Effect<SearchPage, E>, text: string) =>
  Effect.gen(function*() {
    const words = queryWords(text)
    if (words.length === 0) return none
    const pages = yield* Effect.forEach(words, search)
    const pairPages = yield* Effect.forEach(commonPairs(words, pages), search)
    const wordHooks = pages.map((page) => page.hooks)
    const ranked = rankNeighbours(words, wordHooks, pairPages.flatMap((page) => page.hooks))
    return {
      similar: ranked.slice(0, SIMILAR_SHOWN).map(({ category, id, text }) => ({ id, text, category })),
      category: agreedCategory(wordHooks)
    }
  })

/**
 * The neighbours of a hook line in the catalog of the server the clip is scored in (the workers
 * run with it); none where the scorer runs without a catalog, or when a search fails.
 */
export const findNeighbours = (text: string): Effect.Effect<Neighbours> =>
  Effect.gen(function*() {
    const catalog = yield* Effect.serviceOption(HookCatalog)
    if (Option.isNone(catalog)) return none
    return yield* neighboursBy((query) =>
      Effect.map(catalog.value.search(query, Option.none()), (page) => ({
        hooks: page.data.map(({ category, id, text }) => ({ id, text, category })),
        more: Option.isSome(page.next)
      })), text)
  }).pipe(
    Effect.catch((error) => Effect.as(Effect.logWarning("the catalog could not be consulted for a clip's hook", error), none)),
    Effect.catchDefect((defect) => Effect.as(Effect.logWarning("the catalog could not be consulted for a clip's hook", defect), none)),
    Effect.withSpan("HookNeighbours.find")
  )
