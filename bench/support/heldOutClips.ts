/**
 * Held-out caption clips: what the reading is measured on (bench/hook-reading.ts), never what the
 * test suite reads. The hook lines are written for this file (not the demo catalog's, not
 * test/support/captionStyles.ts's), each with an obvious category among the demo catalog's 13;
 * the clips vary every other way a caption varies, drawn from a seeded generator so every run
 * makes the same clips:
 *
 * - every style of test/support/captionStyles.ts (white with and without an outline, dark on a
 *   light box, yellow, red, green, blue and pink with an outline), the same number of clips each;
 * - fonts: the repository's DejaVu Sans and Serif Bold, and the system's DejaVu Sans Condensed
 *   Bold, Sans Book and Sans Mono Bold where present (the repository's fonts where not);
 * - frame sizes 360x640 to 720x1280, text 5.5% to 8% of the width (fitted to it), centred or
 *   from the left, from the top fifth to the lower third; one line or two;
 * - still footage (dark and light flat colours) and moving footage (the blurred test pattern, the
 *   test pattern itself without its timecode, a moving fractal); a caption without an outline is
 *   drawn as creators draw one, over dark or dimmed footage;
 * - a caption that changes mid-clip (two lines of one category, the second from 1 s);
 * - "no text" clips: the same footage with no caption.
 *
 * Clips are 2 s at 24 to 30 fps, so the 132 clips of a full run score in a few minutes on 2 cores.
 */
import { existsSync, mkdirSync, readFileSync, renameSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type CaptionClipOptions, makeCaptionClip } from "../../test/support/captionClips.js"
import { captionStyles, type CaptionStyleName, twoLines } from "../../test/support/captionStyles.js"

/** Hook lines of our own, by the demo category a viewer would put them in. */
export const heldOutHookLines: Readonly<Record<string, ReadonlyArray<string>>> = {
  "personal-finance": [
    "Why your credit score dropped this month",
    "The budgeting mistake costing you thousands",
    "Index funds explained in one minute",
    "What I wish I knew about compound interest"
  ],
  fitness: [
    "Why your squats are not building glutes",
    "Ten minute kettlebell workout at home",
    "Build muscle without lifting heavy weights",
    "Best cardio for losing belly fat"
  ],
  "food-cooking": [
    "Crispy chicken thighs in the air fryer",
    "Homemade ramen ready in fifteen minutes",
    "Meal prep tacos for the whole week",
    "Baking sourdough bread for beginners"
  ],
  "beauty-style": [
    "Skincare routine for oily skin",
    "Why retinol is ruining your skin barrier",
    "Makeup tips for hooded eyes",
    "Sunscreen mistakes that cause acne"
  ],
  "tech-gadgets": [
    "Hidden iphone settings you should turn off",
    "Chatgpt prompts that save me hours",
    "Why your laptop battery dies so fast",
    "Best noise cancelling headphones this year"
  ],
  travel: [
    "Cheap flights to Japan this winter",
    "Packing hacks for a carry on only trip",
    "Hidden beaches in Italy nobody visits",
    "What to know before visiting Iceland"
  ],
  parenting: [
    "Toddler tantrums stopped with one phrase",
    "Potty training tips that really helped",
    "Lunchbox ideas your picky kids will eat",
    "Newborn sleep schedule for tired parents"
  ],
  relationships: [
    "Red flags on a first date",
    "Texting mistakes on dating apps",
    "Signs your situationship is over",
    "How to set boundaries with your in laws"
  ],
  business: [
    "Side hustles that pay every week",
    "How I found my first freelancing client",
    "Etsy shop pricing tips for beginners",
    "LinkedIn mistakes hurting your job search"
  ],
  learning: [
    "Study tips for your final exams",
    "Learn Spanish faster with flashcards",
    "Speed reading trick for college students",
    "Physics explained with one simple experiment"
  ],
  comedy: [
    "When your roommate eats your leftovers",
    "Every family dinner with my grandparents",
    "My cat judging my karaoke night",
    "Customer service calls on a Monday"
  ],
  productivity: [
    "Time blocking changed my whole week",
    "Habits that finally beat procrastination",
    "My notion setup for deep work",
    "Journaling prompts to fight burnout"
  ],
  "health-wellness": [
    "Magnesium before bed fixed my insomnia",
    "Gut health foods to eat daily",
    "Box breathing for anxiety relief",
    "Signs you need more vitamin D"
  ]
}

export interface HeldOutClip {
  /** Unique within a run, usable in a file name. */
  readonly name: string
  /** The caption's style; null for a clip with no caption. */
  readonly style: CaptionStyleName | null
  /** What is on screen, lines joined by spaces (a changing caption: both parts); null for no caption. */
  readonly truth: string | null
  readonly category: string | null
  readonly options: CaptionClipOptions
}

/** A small seeded generator (mulberry32): the same seed, the same clips. */
const seeded = (seed: number) => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const pick = <A>(values: ReadonlyArray<A>): A => values[Math.floor(next() * values.length)]
  const between = (low: number, high: number) => low + next() * (high - low)
  return { next, pick, between }
}

const systemFonts = "/usr/share/fonts/truetype/dejavu"

/** The fonts drawn with, and each one's mean advance as a share of the font size (how wide a line is). */
const fontChoices = (): ReadonlyArray<{ readonly options: Pick<CaptionClipOptions, "font" | "fontFile">; readonly advance: number }> => {
  const system = (file: string, advance: number) =>
    existsSync(`${systemFonts}/${file}`) ? [{ options: { fontFile: `${systemFonts}/${file}` }, advance }] : []
  return [
    { options: { font: "sans" }, advance: 0.68 },
    { options: { font: "serif" }, advance: 0.68 },
    ...system("DejaVuSansCondensed-Bold.ttf", 0.62),
    ...system("DejaVuSans.ttf", 0.62),
    ...system("DejaVuSansMono-Bold.ttf", 0.61)
  ]
}

const frameSizes = [[360, 640], [480, 854], [540, 960], [720, 1280]] as const
const darkStills = ["0x2f4858", "0x7a3b2e", "0x1d1d1d", "0x3b2f5e", "0x4f6d3a"]
const lightStills = ["0xd9d2c5", "0xb8c7d9", "0xe8e0f0"]

type Background = Pick<CaptionClipOptions, "background" | "backgroundColour">

const backgroundFor = (style: CaptionStyleName | null, random: ReturnType<typeof seeded>): Background => {
  // White without an outline is unreadable over light or busy footage, to people as to a reader.
  if (style === "white, no outline") {
    return random.next() < 0.5 ? { background: "still", backgroundColour: random.pick(darkStills) } : { background: "dimmed" }
  }
  const kinds: ReadonlyArray<Background> = [
    { background: "still", backgroundColour: random.pick(darkStills) },
    { background: "still", backgroundColour: random.pick(lightStills) },
    { background: "footage" },
    { background: "pattern" },
    { background: "gradient" }
  ]
  return random.pick(kinds)
}

/** The smallest caption, as a share of the frame's width (27 px on a 540-pixel-wide frame). */
const minimumSize = 0.05

/** One caption's geometry: its lines, a size fitted to the frame's width, where it sits. */
const layout = (texts: ReadonlyArray<string>, width: number, advance: number, random: ReturnType<typeof seeded>) => {
  const longestOf = (drawn: ReadonlyArray<string>) => Math.max(...drawn.flatMap((text) => text.split("\n").map((line) => line.length)))
  const fits = (drawn: ReadonlyArray<string>, share: number) => longestOf(drawn) * advance * share <= 0.92
  const wanted = random.between(0.055, 0.08)
  // Two lines when chosen, or when one line would not fit at the smallest size (captions wrap, they do not shrink).
  const drawn = random.next() < 0.5 || !fits(texts, minimumSize) ? texts.map(twoLines) : texts
  const longest = longestOf(drawn)
  const fontSize = Math.round(width * Math.max(minimumSize, Math.min(wanted, 0.92 / (longest * advance))))
  const textWidth = longest * advance * fontSize / width
  const left = random.next() < 0.3 && textWidth < 0.8 ? random.between(0.04, 0.96 - textWidth) : undefined
  return { drawn, fontSize, left, top: random.between(0.18, 0.65) }
}

/**
 * `perStyle` captioned clips of each caption style (every seventh a caption that changes) and
 * `noText` clips with no caption; lines are dealt from a shuffled deck, so each is used about as
 * often as the others.
 */
export const heldOutClips = (options: {
  readonly perStyle: number
  readonly noText: number
  readonly seed?: number
  /** Other lines than heldOutHookLines (to try a change to the reader on clips the measurement does not use). */
  readonly lines?: Readonly<Record<string, ReadonlyArray<string>>>
}) => {
  const random = seeded(options.seed ?? 20_261_128)
  const fonts = fontChoices()
  const lines = Object.entries(options.lines ?? heldOutHookLines).flatMap(([category, texts]) => texts.map((text) => ({ category, text })))
  const deck = lines.map((line) => ({ line, order: random.next() })).sort((a, b) => a.order - b.order).map(({ line }) => line)
  let dealt = 0
  const deal = () => deck[dealt++ % deck.length]
  const clips: Array<HeldOutClip> = []
  const common = () => {
    const [width, height] = random.pick(frameSizes)
    return { width, height, durationSec: 2, fps: random.pick([24, 25, 30]) }
  }
  for (const style of Object.keys(captionStyles) as Array<CaptionStyleName>) {
    for (let i = 0; i < options.perStyle; i++) {
      const first = deal()
      const changing = i % 7 === 6
      const second = changing ? lines.find((line) => line.category === first.category && line.text !== first.text)! : null
      const frame = common()
      const font = random.pick(fonts)
      const texts = second === null ? [first.text] : [first.text, second.text]
      const { drawn, fontSize, left, top } = layout(texts, frame.width, font.advance, random)
      const captions = second === null ? [{ text: drawn[0] }] : [{ text: drawn[0], until: 1 }, { text: drawn[1], from: 1 }]
      clips.push({
        name: `${style.replace(/[^a-z]+/g, "-")}-${i}`,
        style,
        truth: texts.join(" "),
        category: first.category,
        options: { ...frame, ...font.options, ...backgroundFor(style, random), captions, style: captionStyles[style], fontSize, top, left }
      })
    }
  }
  for (let i = 0; i < options.noText; i++) {
    clips.push({ name: `no-text-${i}`, style: null, truth: null, category: null, options: { ...common(), ...backgroundFor(null, random), captions: [] } })
  }
  return clips
}

/**
 * The clip's file, made once and kept in the temp directory (named by a hash of its options and
 * of the code that draws it), so a before/after pair of runs scores the very same files.
 */
export const heldOutClipFile = async (clip: HeldOutClip): Promise<string> => {
  const drawing = readFileSync(join(import.meta.dir, "../../test/support/captionClips.ts"), "utf8")
  const dir = join(tmpdir(), "hookline-held-out-clips")
  mkdirSync(dir, { recursive: true })
  const path = join(dir, `${clip.name}-${Bun.hash(JSON.stringify(clip.options) + drawing).toString(16)}.mp4`)
  if (existsSync(path)) return path
  const partial = `${path}.${process.pid}.part.mp4`
  await makeCaptionClip(partial, clip.options)
  renameSync(partial, path)
  return path
}
