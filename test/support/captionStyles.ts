/**
 * The caption styles short-form video uses, and hook lines to draw in them: what the reading is
 * measured on (test/hook-reading.test.ts, bench/hook-reading.ts). The lines are not the demo
 * catalog's and were written before any reading was measured; several start or end with a wide
 * or thin letter (H, W, T, B, l, i), where a reading loses letters first.
 */
import type { CaptionClipOptions, CaptionStyle } from "./captionClips.js"

export const captionStyles = {
  "white, outline": {},
  "white, no outline": { outline: null },
  "dark on a light box": { colour: "black", outline: null, box: "white" },
  "yellow, outline": { colour: "0xF7D046" },
  "red, outline": { colour: "0xEA403F" },
  "green, outline": { colour: "0x78C25E" },
  "blue, outline": { colour: "0x3496F0" },
  "pink, outline": { colour: "0xF78FB3" }
} satisfies Record<string, CaptionStyle>

export type CaptionStyleName = keyof typeof captionStyles

export const heldOutLines = [
  "How I paid off my debt in two years",
  "Why you wake up tired every morning",
  "The only budgeting rule you need",
  "Bedtime routine for kids that works",
  "This trick will save your sourdough",
  "What nobody tells you about running",
  "Three habits that fixed my sleep",
  "Watch this before you buy a laptop",
  "I tried the viral pasta recipe",
  "Stop doing this at the gym",
  "Best cheap meals for busy weeks",
  "Learn guitar chords in ten minutes"
] as const

/** Still backgrounds (flat colours of footage) a clip is drawn over, taken in turn. */
const stillColours = ["0x2f4858", "0x7a3b2e", "0x8a8a8a", "0x4f6d3a", "0x1d1d1d"]

/** The line broken in two near its middle, at a space. */
export const twoLines = (text: string) => {
  const middle = text.length / 2
  const spaces = [...text.matchAll(/ /g)].map((match) => match.index)
  const at = spaces.reduce((best, index) => (Math.abs(index - middle) < Math.abs(best - middle) ? index : best), spaces[0] ?? -1)
  return at === -1 ? text : `${text.slice(0, at)}\n${text.slice(at + 1)}`
}

/** Bold DejaVu's mean advance, as a share of the font size: how wide a line is drawn. */
const advance = 0.68

/**
 * A clip of `line` in `style` on a 540x960 clip, 2 s long: over still footage (a flat colour) or
 * moving footage (a blurred moving test pattern; dimmed under a caption without an outline, which
 * is unreadable over bright footage, to people as to the reader), on one line (its size fitted to
 * the width) or two.
 */
export const styledClip = (style: CaptionStyleName, line: string, variant: number): CaptionClipOptions => {
  const oneLine = Math.floor(variant / 2) % 2 === 0
  const text = oneLine ? line : twoLines(line)
  const longest = Math.max(...text.split("\n").map((part) => part.length))
  return {
    captions: [{ text }],
    style: captionStyles[style],
    background: variant % 2 === 0 ? "still" : style === "white, no outline" ? "dimmed" : "footage",
    backgroundColour: stillColours[variant % stillColours.length],
    fontSize: Math.min([30, 34, 38][variant % 3], Math.floor(540 * 0.92 / (longest * advance))),
    top: [0.2, 0.45, 0.65][variant % 3],
    durationSec: 2
  }
}

/** 1 - word error rate (edit distance over words), floored at 0. */
export const wordAccuracy = (truth: ReadonlyArray<string>, read: ReadonlyArray<string>) => {
  const d = Array.from({ length: truth.length + 1 }, (_, i) => Array.from({ length: read.length + 1 }, (_, j) => i + j))
  for (let i = 1; i <= truth.length; i++) {
    for (let j = 1; j <= read.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (truth[i - 1] === read[j - 1] ? 0 : 1))
    }
  }
  return Math.max(0, 1 - d[truth.length][read.length] / truth.length)
}
