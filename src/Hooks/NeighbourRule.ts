/**
 * The catalog hooks nearest to a line of text: the rule both catalog repositories follow, the
 * database in one statement (hook_neighbours, migrations/0012_hook_neighbours.ts) and the
 * in-memory twin with `nearestInMemory` below, on the same numbers.
 *
 * - The line's words are its English lexemes (EnglishLexemes.ts: stop words out, stemmed, as
 *   PostgreSQL's `english` search configuration makes them).
 * - A lexeme weighs r², r = ln(1 + (N - n + 0.5) / (n + 0.5)) (BM25's idf), N the catalog's hooks
 *   and n those holding it: a word few hooks hold counts for more than a common one, and squared,
 *   one rare word ("squat") for more than two common ones ("3", "mistakes"); a word no hook holds
 *   weighs the most (it still counts in the line's total).
 * - A hook's score is the weight of the line's lexemes it holds over the weight of all the line's
 *   lexemes: 0..1, 1 when it holds every one of them.
 * - Hooks rank by score, then newest, then id (both descending), as search ties do.
 * - So that no line scores a million hooks, the candidates are: every hook holding one of the
 *   line's rarer lexemes (taken fewest hooks first while their hooks add up to at most
 *   1,000), and, for the lexemes left, the 200 newest hooks holding any of them (neighbourBounds).
 *   A hook that holds only common words of the line can be left out when it is older than those.
 *   A line with a word the catalog holds always gets at least one hook.
 */

/** How many hooks are scored for a line, at most. */
export interface NeighbourBounds {
  /** Hooks holding the line's rarer lexemes, at most, all of which are scored. */
  readonly rareBudget: number
  /** The newest hooks holding one of the line's other (common) lexemes that are scored. */
  readonly commonSample: number
}

/** The bounds the catalog ranks with (tests use smaller ones to reach the common words' path on a small catalog). */
export const neighbourBounds: NeighbourBounds = { rareBudget: 1_000, commonSample: 200 }
/** At most this many lexemes of a line are searched (a hook line is a sentence or two). */
export const MAX_LINE_LEXEMES = 32

export interface NeighbourRow {
  readonly id: string
  readonly text: string
  readonly category: string | null
  /** 0..1: the share of the line's weighted lexemes the hook holds. */
  readonly score: number
}

/** A catalog hook as the memory twin ranks it. */
export interface NeighbourCandidate {
  readonly id: string
  readonly text: string
  readonly category: string | null
  readonly sortMs: number
  readonly lexemes: ReadonlySet<string>
}

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** A lexeme's weight given the catalog's size and how many hooks hold it (the SQL computes the same float8). */
export const lexemeWeight = (catalogHooks: number, holding: number) => {
  const rarity = Math.log(1 + (catalogHooks - holding + 0.5) / (holding + 0.5))
  return rarity * rarity
}

/** The `wanted` nearest hooks to a line's lexemes among `hooks` (the whole catalog), by the rule above. */
export const nearestInMemory = (
  hooks: ReadonlyArray<NeighbourCandidate>,
  lineLexemes: ReadonlyArray<string>,
  wanted: number,
  { commonSample, rareBudget }: NeighbourBounds = neighbourBounds
): ReadonlyArray<NeighbourRow> => {
  const terms = [...new Set(lineLexemes)]
    .map((lexeme) => ({ lexeme, holding: hooks.filter((hook) => hook.lexemes.has(lexeme)).length }))
    .sort((a, b) => a.holding - b.holding || compareText(a.lexeme, b.lexeme))
  const weights = terms.map(({ holding }) => lexemeWeight(hooks.length, holding))
  const rare = new Set<string>()
  const common = new Set<string>()
  let rareHooks = 0
  for (const { holding, lexeme } of terms) {
    if (holding === 0) continue
    if (common.size === 0 && rareHooks + holding <= rareBudget) {
      rare.add(lexeme)
      rareHooks += holding
    } else common.add(lexeme)
  }
  if (rare.size === 0 && common.size === 0) return []
  const total = weights.reduce((sum, weight) => sum + weight, 0)
  const newestFirst = (a: NeighbourCandidate, b: NeighbourCandidate) => b.sortMs - a.sortMs || compareText(b.id, a.id)
  const holdsAny = (words: ReadonlySet<string>) => (hook: NeighbourCandidate) => [...words].some((word) => hook.lexemes.has(word))
  const candidates = new Set([
    ...hooks.filter(holdsAny(rare)),
    ...hooks.filter(holdsAny(common)).sort(newestFirst).slice(0, commonSample)
  ])
  return [...candidates]
    .map((hook) => {
      const held = terms.reduce((sum, { lexeme }, i) => (hook.lexemes.has(lexeme) ? sum + weights[i] : sum), 0)
      return { hook, score: held / total }
    })
    .sort((a, b) => b.score - a.score || newestFirst(a.hook, b.hook))
    .slice(0, wanted)
    .map(({ hook, score }) => ({ id: hook.id, text: hook.text, category: hook.category, score }))
}
