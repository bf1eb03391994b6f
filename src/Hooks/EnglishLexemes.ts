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

/** PostgreSQL's tsearch_data/english.stop. */
const stopWords: ReadonlySet<string> = new Set(
  ("i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself " +
    "it its itself they them their theirs themselves what which who whom this that these those am is are was were be " +
    "been being have has had having do does did doing a an the and but if or because as until while of at by for with " +
    "about against between into through during before after above below to from up down in out on off over under again " +
    "further then once here there when where why how all any both each few more most other some such no nor not only " +
    "own same so than too very s t can will just don should now").split(" ")
)

const exceptions: ReadonlyMap<string, string> = new Map([
  ["skis", "ski"], ["skies", "sky"], ["dying", "die"], ["lying", "lie"], ["tying", "tie"], ["idly", "idl"], ["gently", "gentl"],
  ["ugly", "ugli"], ["early", "earli"], ["only", "onli"], ["singly", "singl"], ["sky", "sky"], ["news", "news"],
  ["howe", "howe"], ["atlas", "atlas"], ["cosmos", "cosmos"], ["bias", "bias"], ["andes", "andes"]
])
const afterStep1a = new Set(["inning", "outing", "canning", "herring", "earring", "proceed", "exceed", "succeed"])

const isVowel = (c: string | undefined) => c !== undefined && "aeiouy".includes(c)

/** Start of the region after the first non-vowel following a vowel, from `from`. */
const regionAfter = (word: string, from: number) => {
  for (let i = from + 1; i < word.length; i++) if (!isVowel(word[i]) && isVowel(word[i - 1])) return i + 1
  return word.length
}

/** A short syllable ending at `end` (exclusive): non-vowel, vowel, non-vowel other than w, x, Y; or vowel, non-vowel at the start. */
const shortSyllableAt = (word: string, end: number) =>
  (end >= 3 && !isVowel(word[end - 3]) && isVowel(word[end - 2]) && !isVowel(word[end - 1]) && !"wxY".includes(word[end - 1])) ||
  (end === 2 && isVowel(word[0]) && !isVowel(word[1]))

interface Stem {
  word: string
  readonly r1: number
  readonly r2: number
}

/** The longest of `suffixes` the word ends with. */
const longest = (word: string, suffixes: ReadonlyArray<string>) =>
  suffixes.filter((suffix) => word.endsWith(suffix)).sort((a, b) => b.length - a.length)[0]

const step1a = (s: Stem) => {
  const w = s.word
  const suffix = longest(w, ["sses", "ied", "ies", "us", "ss", "s"])
  if (suffix === "sses") s.word = w.slice(0, -2)
  else if (suffix === "ied" || suffix === "ies") s.word = w.slice(0, -3) + (w.length > 4 ? "i" : "ie")
  else if (suffix === "s" && [...w.slice(0, -2)].some(isVowel)) s.word = w.slice(0, -1)
}

const step1b = (s: Stem) => {
  const w = s.word
  const suffix = longest(w, ["eed", "eedly", "ed", "edly", "ing", "ingly"])
  if (suffix === undefined) return
  if (suffix === "eed" || suffix === "eedly") {
    if (w.length - suffix.length >= s.r1) s.word = w.slice(0, -suffix.length) + "ee"
    return
  }
  const stem = w.slice(0, -suffix.length)
  if (![...stem].some(isVowel)) return
  if (/(at|bl|iz)$/.test(stem)) s.word = stem + "e"
  else if (/(bb|dd|ff|gg|mm|nn|pp|rr|tt)$/.test(stem)) s.word = stem.slice(0, -1)
  else if (s.r1 >= stem.length && shortSyllableAt(stem, stem.length)) s.word = stem + "e"
  else s.word = stem
}

const step1c = (s: Stem) => {
  const w = s.word
  if (w.length > 2 && /[yY]$/.test(w) && !isVowel(w[w.length - 2])) s.word = w.slice(0, -1) + "i"
}

const step2Rules: Readonly<Record<string, string>> = {
  tional: "tion", enci: "ence", anci: "ance", abli: "able", entli: "ent", izer: "ize", ization: "ize", ational: "ate",
  ation: "ate", ator: "ate", alism: "al", aliti: "al", alli: "al", fulness: "ful", ousli: "ous", ousness: "ous",
  iveness: "ive", iviti: "ive", biliti: "ble", bli: "ble", ogi: "og", fulli: "ful", lessli: "less", li: ""
}
const step3Rules: Readonly<Record<string, string>> = {
  tional: "tion", ational: "ate", alize: "al", icate: "ic", iciti: "ic", ical: "ic", ful: "", ness: "", ative: ""
}
const step4Suffixes = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ism", "ate", "iti", "ous", "ive", "ize", "ion"]

const step2 = (s: Stem) => {
  const w = s.word
  const suffix = longest(w, Object.keys(step2Rules))
  if (suffix === undefined || w.length - suffix.length < s.r1) return
  const before = w[w.length - suffix.length - 1]
  if (suffix === "ogi" && before !== "l") return
  if (suffix === "li" && (before === undefined || !"cdeghkmnrt".includes(before))) return
  s.word = w.slice(0, -suffix.length) + step2Rules[suffix]
}

const step3 = (s: Stem) => {
  const w = s.word
  const suffix = longest(w, Object.keys(step3Rules))
  if (suffix === undefined || w.length - suffix.length < s.r1) return
  if (suffix === "ative" && w.length - suffix.length < s.r2) return
  s.word = w.slice(0, -suffix.length) + step3Rules[suffix]
}

const step4 = (s: Stem) => {
  const w = s.word
  const suffix = longest(w, step4Suffixes)
  if (suffix === undefined || w.length - suffix.length < s.r2) return
  if (suffix === "ion" && !/[st]$/.test(w.slice(0, -3))) return
  s.word = w.slice(0, -suffix.length)
}

const step5 = (s: Stem) => {
  const w = s.word
  const at = w.length - 1
  if (w.endsWith("e") && (at >= s.r2 || (at >= s.r1 && !shortSyllableAt(w, at)))) s.word = w.slice(0, -1)
  else if (w.endsWith("ll") && at >= s.r2) s.word = w.slice(0, -1)
}

/** Snowball's English (Porter2) stem of a lowercase word. */
export const stem = (input: string): string => {
  const exception = exceptions.get(input)
  if (exception !== undefined) return exception
  if (input.length <= 2) return input
  const word = input.replace(/^y/, "Y").replace(/([aeiouy])y/g, "$1Y")
  const prefix = /^(gener|commun|arsen)/.exec(word)
  const r1 = prefix === null ? regionAfter(word, 0) : prefix[0].length
  const s: Stem = { word, r1, r2: regionAfter(word, r1) }
  step1a(s)
  if (afterStep1a.has(s.word)) return s.word
  for (const step of [step1b, step1c, step2, step3, step4, step5]) step(s)
  return s.word.replace(/Y/g, "y")
}

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
