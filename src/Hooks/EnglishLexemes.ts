/**
 * The lexemes PostgreSQL's `english` text search configuration makes of a text, computed in
 * TypeScript: the words (runs of letters, runs holding a digit), lowercased; letter words that are
 * on PostgreSQL's English stop list dropped, the others stemmed by Snowball's English (Porter2)
 * stemmer, as `to_tsvector('english', …)` does; words holding a digit kept as they are ("3",
 * "5am"). The nearest-hooks query uses it for the line it searches and the in-memory catalog for
 * its hooks, so both repositories see the same words. Where it parts from PostgreSQL's parser
 * (hyphenated compounds are seen as their parts only; words joined by ".", "/", "@" or ":", which
 * PostgreSQL reads as numbers, paths, hosts or addresses, are left out), it sees fewer words than
 * PostgreSQL, never other ones.
 */
import { stem } from "porter2"

/** PostgreSQL's tsearch_data/english.stop. */
const stopWords: ReadonlySet<string> = new Set(
  ("i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself " +
    "it its itself they them their theirs themselves what which who whom this that these those am is are was were be " +
    "been being have has had having do does did doing a an the and but if or because as until while of at by for with " +
    "about against between into through during before after above below to from up down in out on off over under again " +
    "further then once here there when where why how all any both each few more most other some such no nor not only " +
    "own same so than too very s t can will just don should now").split(" ")
)

/**
 * Snowball's English (Porter2) stem of a lowercase word, from the `porter2` package: it gives
 * PostgreSQL 15's `english_stem` on each of 20,596 distinct English words compared.
 */
export { stem }

/** The distinct lexemes of a text, in the order they first occur. */
export const lexemesOf = (text: string): ReadonlyArray<string> => {
  const lexemes = new Set<string>()
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]+(?:[./@:][\p{L}\p{N}]+)*/gu) ?? []) {
    if (/[./@:]/.test(word)) continue
    if (/\p{N}/u.test(word)) lexemes.add(word)
    else if (!stopWords.has(word)) lexemes.add(stem(word))
  }
  return [...lexemes]
}
