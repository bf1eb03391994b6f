import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer } from "effect"
import { join } from "node:path"
import { seedDemoDatabase } from "../src/Hooks/DemoCatalog.js"
import { lexemesOf } from "../src/Hooks/EnglishLexemes.js"
import { mergeReadings, wordsOf } from "../src/Predictions/HookText.js"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { type CaptionClipOptions, captionClipDir, makeCaptionClip } from "./support/captionClips.js"
import { captionStyles, type CaptionStyleName, heldOutLines, styledClip, wordAccuracy } from "./support/captionStyles.js"
import { createLink, expectReceived, fastBackground, put, waitForStatus } from "./support/predictions.js"
import { type PredictionBody, startTestServer, type TestServer } from "./support/server.js"

const clipsToMake = {
  clean: { captions: [{ text: "Nobody talks about index funds" }], fontSize: 30 },
  twoLines: { captions: [{ text: "Stop scrolling if you\nhate meal prep" }], fontSize: 36 },
  changing: {
    captions: [{ text: "Day 12 of potty training", until: 1.2 }, { text: "my toddler finally sleeps", from: 1.2 }],
    fontSize: 30
  },
  moving: { captions: [{ text: "The cheapest way to\nfind cheap flights" }], background: "moving" },
  noText: { captions: [], background: "moving" },
  tooSmall: { captions: [{ text: "Nobody talks about index funds" }], fontSize: 6 }
} satisfies Record<string, CaptionClipOptions>

type ClipName = keyof typeof clipsToMake

let server: TestServer
let owner: { accountId: string; key: string }
const results = new Map<ClipName, PredictionBody>()

const score = async (path: string) => {
  const link = await createLink(server, owner.key)
  expectReceived(await put(link.upload_url, Bun.file(path)), link)
  return waitForStatus(server, owner.key, link.prediction_id, "succeeded")
}

beforeAll(async () => {
  const dir = captionClipDir()
  const paths = await Promise.all(
    Object.entries(clipsToMake).map(async ([name, options]) => [name, await makeCaptionClip(join(dir, `${name}.mp4`), options)] as const)
  )
  // What is read is under test here, not the time cap: a loaded machine must not turn a reading into null.
  server = await startTestServer({ ...fastBackground, WORKER_CONCURRENCY: "2", SCORER_TEXT_TIMEOUT: "60 seconds" })
  await seedDemoDatabase(server.databaseUrl, 2_000)
  owner = await server.account({ plan: "pro", monthly_balance: 1000 })
  await Promise.all(paths.map(async ([name, path]) => results.set(name as ClipName, await score(path))))
})
afterAll(() => server.close())

const resultOf = (name: ClipName) => results.get(name)!.result!

/**
 * What a user checks of similar hooks: up to 3 catalog hooks, highest score first, each sharing
 * a word with what was read, the nearest of the named category.
 */
const expectNeighbours = (name: ClipName, category: string) => {
  const result = resultOf(name)
  const read = new Set(lexemesOf(result.hook_text!))
  expect(result.similar_hooks.length).toBeGreaterThan(0)
  expect(result.similar_hooks.length).toBeLessThanOrEqual(3)
  for (const hook of result.similar_hooks) {
    expect(hook.id).toMatch(/^hook_/)
    expect(lexemesOf(hook.text).some((word) => read.has(word))).toBe(true)
    expect(hook.score).toBeGreaterThan(0)
    expect(hook.score).toBeLessThanOrEqual(1)
  }
  const scores = result.similar_hooks.map((hook) => hook.score)
  expect(scores).toEqual(scores.toSorted((a, b) => b - a))
  expect(result.similar_hooks[0].category).toBe(category)
  expect(result.category).toEqual({ slug: category })
}

describe("the hook on screen, read from the clip", () => {
  test("a clean caption is read word for word, with its category and similar catalog hooks", async () => {
    expect(resultOf("clean").hook_text).toBe("Nobody talks about index funds")
    expect(resultOf("clean").hook_text_confidence!).toBeGreaterThan(0.8)
    expectNeighbours("clean", "personal-finance")
  })

  test("a caption on two lines is one line of text", async () => {
    expect(resultOf("twoLines").hook_text).toBe("Stop scrolling if you hate meal prep")
    expectNeighbours("twoLines", "food-cooking")
  })

  test("a caption that changes is read as a sequence, in order", async () => {
    expect(resultOf("changing").hook_text).toBe("Day 12 of potty training\nmy toddler finally sleeps")
    expectNeighbours("changing", "parenting")
  })

  test("a caption over moving footage is read", async () => {
    expect(resultOf("moving").hook_text).toBe("The cheapest way to find cheap flights")
    expectNeighbours("moving", "travel")
  })

  test("a clip without text, and one with text too small to read, score as before with the hook fields empty", async () => {
    for (const name of ["noText", "tooSmall"] as const) {
      const result = resultOf(name)
      expect(["low", "medium", "high"]).toContain(result.band)
      expect(result.hook_text).toBeNull()
      expect(result.hook_text_confidence).toBeNull()
      expect(result.similar_hooks).toEqual([])
      expect(result.category).toBeNull()
    }
  })

  test("the webhook payload and GET agree (the stored result is the answered one)", async () => {
    const again = await server.request<PredictionBody>(`/v1/predict/${results.get("clean")!.id}`, { key: owner.key })
    expect(again.body.result).toEqual(resultOf("clean"))
  })
})

describe("every common caption style", () => {
  /**
   * Two clips a style: one line over still footage, two lines over moving footage, each with a
   * hook line of its own (test/support/captionStyles.ts). bench/hook-reading.ts measures the same
   * styles on more clips.
   */
  const styles = Object.keys(captionStyles) as Array<CaptionStyleName>
  const readings = new Map<CaptionStyleName, Array<{ truth: string; read: string | null }>>()
  beforeAll(async () => {
    const dir = captionClipDir()
    // Every clip is scored inside the scorer layer's scope: its OCR worker and cache directory go when it closes.
    await Effect.runPromise(Effect.gen(function*() {
      const scorer = yield* ClipScorer
      for (const [s, style] of styles.entries()) {
        for (const [k, variant] of [0, 3].entries()) {
          const truth = heldOutLines[(2 * s + k) % heldOutLines.length]
          const path = yield* Effect.promise(() => makeCaptionClip(join(dir, `style-${s}-${k}.mp4`), styledClip(style, truth, variant)))
          const score = yield* scorer.score({ path })
          readings.set(style, [...(readings.get(style) ?? []), { truth, read: score.hook?.text ?? null }])
        }
      }
    }).pipe(
      Effect.provide(ClipScorer.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { SCORER_TEXT_TIMEOUT: "60 seconds" } })))))
    ))
  }, 240_000)

  test.each(styles)("%s: read over still and moving footage, on one line and two", (style) => {
    const read = readings.get(style)!
    const accuracy = read.reduce((sum, { read, truth }) => sum + wordAccuracy(wordsOf(truth), wordsOf(read ?? "")), 0) / read.length
    expect({ style, accuracy: accuracy >= 0.85 ? "at least 85%" : accuracy, read }).toMatchObject({ style, accuracy: "at least 85%" })
  })
})

describe("SCORER_READ_TEXT=false", () => {
  test("the scorer reads no text: the clip scores with nothing read", async () => {
    const dir = captionClipDir()
    const path = await makeCaptionClip(join(dir, "off.mp4"), clipsToMake.clean)
    const provider = ConfigProvider.fromEnv({ env: { SCORER_READ_TEXT: "false" } })
    const score = await Effect.runPromise(
      Effect.flatMap(Effect.service(ClipScorer), (scorer) => scorer.score({ path })).pipe(
        Effect.provide(ClipScorer.layer),
        Effect.provide(ConfigProvider.layer(provider))
      )
    )
    expect(score.hook).toEqual({ text: null, confidence: null, similar: [] })
    expect(score.category).toBeNull()
    expect(["low", "medium", "high"]).toContain(score.band)
  })
})

describe("merging readings", () => {
  const word = (text: string, confidence = 95) => ({ text, confidence })
  const line = (text: string, confidence = 95) => text.split(" ").map((w) => word(w, confidence))

  test("the same caption on three frames is one line; a misread word on one frame does not make a second", () => {
    const reading = mergeReadings([[line("Stop scrolling")], [line("Stop scrolling")], [[word("Stop"), word("scrolIing", 40)]]], 0.6)
    expect(reading).toEqual({ text: "Stop scrolling", confidence: 0.95 })
  })

  test("words under the threshold are dropped; a frame of noise alone gives nothing", () => {
    expect(mergeReadings([[[word("|", 90), word("xq", 30)]]], 0.6)).toBeNull()
    expect(mergeReadings([[line("Stop"), [word("ghost", 20)]]], 0.6)?.text).toBe("Stop")
  })

  test("an upright bar among words is the word I, which is kept a little under the threshold", () => {
    expect(mergeReadings([[[word("How"), word("|", 80), word("paid")]]], 0.6)?.text).toBe("How I paid")
    expect(mergeReadings([[[word("How"), word("I", 50), word("a", 45), word("xq", 55)]]], 0.6)?.text).toBe("How I")
  })

  test("a caption revealed word by word keeps its whole form", () => {
    expect(mergeReadings([[line("Stop")], [line("Stop scrolling now")]], 0.6)?.text).toBe("Stop scrolling now")
  })
})
