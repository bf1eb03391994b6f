/**
 * The hooks nearest to a line (src/Hooks/NeighbourRule.ts, migrations/0012_hook_neighbours.ts)
 * and the category rule (src/Predictions/HookNeighbours.ts), on one catalog held three ways:
 * PostgreSQL, the embedded PGlite and the in-memory repository. Every case runs on each, and the
 * three answer the very same rows and scores.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer, ManagedRuntime, References } from "effect"
import { demoCategories, demoHook } from "../src/Hooks/DemoData.js"
import { lexemesOf, stem } from "../src/Hooks/EnglishLexemes.js"
import { lexemeWeight, type NeighbourBounds, neighbourBounds, type NeighbourRow } from "../src/Hooks/NeighbourRule.js"
import { CatalogRepo } from "../src/Hooks/Repo.js"
import { makeCatalogRepoInMemory } from "../src/Hooks/RepoMemory.js"
import { categoryOf, neighboursBy } from "../src/Predictions/HookNeighbours.js"
import { SqlLive } from "../src/Sql.js"
import { categoryLines } from "./support/categoryLines.js"
import { hookRecord } from "./support/hookRecord.js"
import { adminDatabaseUrl, createDatabase, dropDatabase, testPool } from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

/** Hooks made for the cases below, with words no demo hook holds. */
const madeUp = [
  hookRecord("hook_made_a", "Glorbix plumfen quazzle for beginners", { category: "learning", published_at: "2024-01-01T00:00:00.000Z" }),
  hookRecord("hook_made_b", "Glorbix plumfen in one week", { category: "learning", published_at: "2024-01-02T00:00:00.000Z" }),
  hookRecord("hook_made_c", "Quazzle, explained", { category: "comedy", published_at: "2024-01-04T00:00:00.000Z" }),
  hookRecord("hook_made_d", "Quazzle explained again", { category: "comedy", published_at: "2024-01-03T00:00:00.000Z" }),
  hookRecord("hook_made_e", "Why zebrafish sleep with one eye open", { category: "learning", published_at: "2023-05-01T00:00:00.000Z" })
]
const catalog = [...Array.from({ length: 2_000 }, (_, i) => demoHook(i)), ...madeUp]

interface Backend {
  readonly name: string
  readonly runtime: ManagedRuntime.ManagedRuntime<CatalogRepo, unknown>
  readonly stop: () => Promise<void>
}

const sqlBackend = async (name: string, env: Record<string, string>, stop: () => Promise<void>): Promise<Backend> => {
  const layer = CatalogRepo.layer.pipe(
    Layer.provide(SqlLive),
    Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn")),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))
  )
  const runtime = ManagedRuntime.make(layer)
  await runtime.runPromise(Effect.flatMap(CatalogRepo, (repo) => repo.upsertHooks(catalog)))
  return { name, runtime, stop: async () => {
    await runtime.dispose()
    await stop()
  } }
}

const backends: Array<Backend> = []

beforeAll(async () => {
  const databaseUrl = await createDatabase()
  const memory = makeCatalogRepoInMemory({ hooks: catalog })
  backends.push(
    { name: "memory", runtime: ManagedRuntime.make(memory.layer), stop: async () => {} },
    // A small walk window here: common words' hooks are found by a short walk, or by sorting their
    // matches when it falls short; the answers must not change.
    await sqlBackend(
      "PostgreSQL",
      { DATABASE_URL: databaseUrl, DATA_DIR: tempDir("hookline-neighbours-"), SEARCH_WALK_WINDOW: "50" },
      () => dropDatabase(databaseUrl)
    ),
    await sqlBackend("embedded", { DATA_DIR: tempDir("hookline-neighbours-embedded-") }, async () => {})
  )
}, 120_000)
afterAll(async () => {
  for (const backend of backends) await backend.stop()
})

/** The ranked rows for `line` on every backend, checked to be the same everywhere; the first backend's. */
const rankedEverywhere = async (line: string, rows: number, bounds = neighbourBounds): Promise<ReadonlyArray<NeighbourRow>> => {
  const answers = await Promise.all(backends.map((backend) =>
    backend.runtime.runPromise(Effect.flatMap(CatalogRepo, (repo) => repo.neighbours(lexemesOf(line), rows, bounds)))
  ))
  for (const [i, answer] of answers.entries()) expect({ backend: backends[i].name, answer }).toEqual({ backend: backends[i].name, answer: answers[0] })
  return answers[0]
}

const neighboursEverywhere = async (line: string) => {
  const answers = await Promise.all(backends.map((backend) =>
    backend.runtime.runPromise(Effect.flatMap(CatalogRepo, (repo) => neighboursBy(repo.neighbours, line)))
  ))
  for (const answer of answers) expect(answer).toEqual(answers[0])
  return answers[0]
}

describe("the nearest hooks to a line", () => {
  test("3 mistakes killing your squat gains: three hooks, highest score first, the rare word's first; fitness", async () => {
    const { category, similar } = await neighboursEverywhere("3 mistakes killing your squat gains")
    expect(similar).toHaveLength(3)
    expect(lexemesOf(similar[0].text)).toContain("squat")
    expect(similar[0].category).toBe("fitness")
    const line = new Set(lexemesOf("3 mistakes killing your squat gains"))
    for (const hook of similar) {
      expect(lexemesOf(hook.text).some((word) => line.has(word))).toBe(true)
      expect(hook.score).toBeGreaterThan(0)
      expect(hook.score).toBeLessThanOrEqual(1)
    }
    expect(similar.map((hook) => hook.score)).toEqual(similar.map((hook) => hook.score).toSorted((a, b) => b - a))
    expect(category).toEqual({ slug: "fitness" })
  })

  test("a line sharing one rare word with one hook finds that hook", async () => {
    const { similar } = await neighboursEverywhere("The zebrafish documentary was wild")
    expect(similar.map((hook) => hook.id)[0]).toBe("hook_made_e")
  })

  test("a line sharing no word with the catalog (stop words aside) gets no hooks and no category", async () => {
    expect(await neighboursEverywhere("Wibblequark snorfelbast: is it you or them?")).toEqual({ similar: [], category: null })
    expect(await rankedEverywhere("", 40)).toEqual([])
  })

  test("hooks rank by the weighted share of the line they hold, ties newest first; the score is that share", async () => {
    const ranked = await rankedEverywhere("glorbix plumfen quazzle", 4)
    expect(ranked.map((hook) => hook.id)).toEqual(["hook_made_a", "hook_made_b", "hook_made_c", "hook_made_d"])
    // glorbix and plumfen are held by 2 hooks each, quazzle by 3.
    const hooks = catalog.length
    const [rare, common] = [lexemeWeight(hooks, 2), lexemeWeight(hooks, 3)]
    expect(rare).toBeGreaterThan(common)
    const total = rare + rare + common
    expect(ranked.map((hook) => hook.score)).toEqual([1, (rare + rare) / total, common / total, common / total])
    expect(rare).toBeCloseTo(Math.log(1 + (hooks - 2 + 0.5) / 2.5) ** 2, 12)
  })

  test("the category: at least 85% right on hook lines the demo catalog was not made from", async () => {
    let right = 0
    const missed: Array<string> = []
    for (const [line, slug] of categoryLines) {
      const { category, similar } = await neighboursEverywhere(line)
      expect({ line, similar: similar.length > 0 }).toEqual({ line, similar: true })
      if (category?.slug === slug) right++
      else missed.push(`${line}: ${category?.slug ?? "none"}`)
    }
    expect(categoryLines.length).toBeGreaterThanOrEqual(40)
    expect(new Set(categoryLines.map(([, slug]) => slug))).toEqual(new Set(demoCategories.map((category) => category.slug)))
    expect({ right: right / categoryLines.length >= 0.85, missed }).toEqual({ right: true, missed })
  }, 60_000)

  test("words too common for the rare budget: their newest hooks are scored, the same on every backend", async () => {
    const small: NeighbourBounds = { rareBudget: 60, commonSample: 25 }
    const lines = [
      "I tried this every day for a week and I can't go back, watch this before you start, nobody tells you the truth",
      ...categoryLines.slice(0, 12).map(([line]) => line)
    ]
    for (const line of lines) expect((await rankedEverywhere(line, 40, small)).length).toBeGreaterThan(0)
    // Every word common, one hook sampled: the newest hook holding a word of the line.
    const line = "the truth about every day"
    const words = new Set(lexemesOf(line))
    const newest = catalog
      .filter((hook) => lexemesOf(hook.text).some((word) => words.has(word)))
      .toSorted((a, b) => Date.parse(b.published_at!) - Date.parse(a.published_at!))[0]
    expect((await rankedEverywhere(line, 3, { rareBudget: 0, commonSample: 1 })).map((hook) => hook.id)).toEqual([newest.id])
  })
})

describe("the category rule", () => {
  const row = (id: string, text: string, category: string | null, score: number): NeighbourRow => ({ id, text, category, score })

  test("the category most of the line's words point to, though another's hooks score more; a spread word points nowhere", () => {
    const ranked = [
      row("hook_1", "Budgeting in Lisbon", "travel", 0.95),
      row("hook_2", "Budgeting rules", "personal-finance", 0.3),
      row("hook_3", "Budgeting apps", "personal-finance", 0.3),
      row("hook_4", "Rules of money", "personal-finance", 0.3),
      row("hook_5", "Lisbon tips", "travel", 0.1),
      row("hook_6", "Money tips", "personal-finance", 0.1),
      row("hook_7", "Dinner tips", "food-cooking", 0.1)
    ]
    // budget: 2 of 3 personal-finance; rule: 2 of 2; tip: 1 of 3 each, nowhere.
    expect(categoryOf(lexemesOf("budgeting rules tips"), ranked)).toEqual({ slug: "personal-finance" })
    // lisbon: 2 of 2 travel, against budget's personal-finance: a tie, settled by the scores.
    expect(categoryOf(lexemesOf("lisbon budgeting"), ranked)).toEqual({ slug: "travel" })
  })

  test("when no word points anywhere, or words tie, the hooks' scores decide; a tie there, or no category, is none", () => {
    const spread = [row("hook_1", "Tips", "travel", 0.6), row("hook_2", "Tips", "comedy", 0.3), row("hook_3", "Tips", "beauty-style", 0.2)]
    expect(categoryOf(["tip"], spread)).toEqual({ slug: "travel" })
    expect(categoryOf(["tip"], [row("hook_1", "Tips", "travel", 0.5), row("hook_2", "Tips", "comedy", 0.5)])).toBeNull()
    expect(categoryOf(["tip"], [row("hook_1", "Tips", null, 0.5)])).toBeNull()
    expect(categoryOf(["tip"], [])).toBeNull()
  })
})

describe("the lexemes, as PostgreSQL's english configuration makes them", () => {
  test("stop words out, stems as Snowball's English stemmer gives them, numbers kept", () => {
    expect(lexemesOf("3 mistakes killing your squat gains")).toEqual(["3", "mistak", "kill", "squat", "gain"])
    expect(lexemesOf("Why you wake up TIRED every morning, don't you?")).toEqual(["wake", "tire", "everi", "morn"])
    expect(["generously", "communication", "skies", "hopping", "agreed", "constructor"].map(stem))
      .toEqual(["generous", "communic", "sky", "hop", "agre", "constructor"])
    expect(lexemesOf("the 50/30/20 budget at 5am")).toEqual(["budget", "5am"])
  })

  test("every lexeme of the catalog's and the category lines' texts is one PostgreSQL makes of the same text", async () => {
    const texts = [...catalog.map((hook) => hook.text), ...categoryLines.map(([line]) => line)]
    const pool = testPool(adminDatabaseUrl, 1)
    try {
      const { rows } = await pool.query<{ readonly lexemes: ReadonlyArray<string> }>(
        "SELECT tsvector_to_array(to_tsvector('english', text)) AS lexemes FROM unnest($1::text[]) WITH ORDINALITY AS t(text, n) ORDER BY n",
        [texts]
      )
      const strays = texts.flatMap((text, i) => {
        const made = new Set(rows[i].lexemes)
        return lexemesOf(text).filter((lexeme) => !made.has(lexeme)).map((lexeme) => `${lexeme} (${text})`)
      })
      expect(rows).toHaveLength(texts.length)
      expect(strays).toEqual([])
    } finally {
      await pool.end()
    }
  })
})
