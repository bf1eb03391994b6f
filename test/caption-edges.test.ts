import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { join } from "node:path"
import { wordsOf } from "../src/Predictions/HookText.js"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { captionClipDir, type CaptionClipOptions, makeCaptionClip } from "./support/captionClips.js"
import { captionStyles, type CaptionStyleName, twoLines } from "./support/captionStyles.js"

/**
 * Lines that start and end with a wide letter (H, W, B, T, M) or a thin one (l, i), where a
 * reading that crops the caption too tightly, or lets the frame's border touch it, loses a
 * letter first ("low" for "How", "tire" for "tired"). Each is drawn in a different style and
 * place: centred, from the frame's left border, across nearly the whole width, on two lines (so
 * the words at the break are line ends too).
 */
const cases: ReadonlyArray<{ line: string; style: CaptionStyleName; layout: "centred" | "at the left border" | "full width" | "two lines" }> = [
  { line: "How I finally got to Bali", style: "white, outline", layout: "centred" },
  { line: "With one trick I fixed my wifi", style: "yellow, outline", layout: "at the left border" },
  { line: "The easiest way to cook well", style: "dark on a light box", layout: "full width" },
  { line: "Build muscle with one protocol", style: "white, no outline", layout: "two lines" },
  { line: "learning chess took me a MONTH", style: "blue, outline", layout: "centred" },
  { line: "its time to land your dream JOB", style: "red, outline", layout: "at the left border" },
  { line: "When you finally try it NOW", style: "pink, outline", layout: "two lines" },
  { line: "This is how you get abs FAST", style: "green, outline", layout: "full width" },
  { line: "Taxes made simple in one HIT", style: "dark on a light box", layout: "at the left border" },
  { line: "lazy dinner ideas for a weeknight", style: "white, outline", layout: "two lines" }
]

/** Bold DejaVu's mean advance, as a share of the font size. */
const advance = 0.68

const clipOf = ({ layout, line, style }: (typeof cases)[number]): CaptionClipOptions => {
  const text = layout === "two lines" ? twoLines(line) : line
  const longest = Math.max(...text.split("\n").map((part) => part.length))
  const width = layout === "full width" ? 0.97 : 0.9
  return {
    captions: [{ text }],
    style: captionStyles[style],
    background: style === "white, no outline" ? "dimmed" : "footage",
    fontSize: Math.min(36, Math.floor(540 * width / (longest * advance))),
    top: 0.4,
    ...(layout === "at the left border" ? { left: 0.01 } : {}),
    durationSec: 2
  }
}

/** The words of a line that are a line's first or last as drawn (both lines' ends when it is on two). */
const edgeWords = (text: string) => text.split("\n").flatMap((part) => {
  const words = wordsOf(part)
  return [words[0], words[words.length - 1]]
})

describe("whole words at the ends of a caption's lines", () => {
  const runtime = ManagedRuntime.make(
    ClipScorer.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { SCORER_TEXT_TIMEOUT: "60 seconds" } }))))
  )
  const readings = new Map<string, string | null>()
  beforeAll(async () => {
    const dir = captionClipDir()
    const scorer = await runtime.runPromise(Effect.service(ClipScorer))
    for (const [i, edge] of cases.entries()) {
      const path = await makeCaptionClip(join(dir, `edge-${i}.mp4`), clipOf(edge))
      const score = await runtime.runPromise(scorer.score({ path }))
      readings.set(edge.line, score.hook?.text ?? null)
    }
  }, 240_000)
  afterAll(() => runtime.dispose())

  test.each(cases)("$line ($style, $layout): the first and last words of each line are read whole", (edge) => {
    const drawn = edge.layout === "two lines" ? twoLines(edge.line) : edge.line
    const read = new Set(wordsOf(readings.get(edge.line) ?? ""))
    expect({ read: readings.get(edge.line), missing: edgeWords(drawn).filter((word) => !read.has(word)) })
      .toEqual({ read: readings.get(edge.line), missing: [] })
  })
})
