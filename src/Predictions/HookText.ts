/**
 * From what OCR saw on a few frames to one hook line:
 *
 * - On each frame, words under the confidence threshold are dropped, and the lines left are
 *   joined with spaces: a caption wrapped over two lines is one sentence.
 * - Across frames, a caption seen again (the same words, or most of them: OCR may misread one
 *   word on one frame) is one caption, kept as read on its most confident frame; a caption that
 *   grows word by word keeps its longest form; a caption that changes starts the next part of a
 *   sequence, and the parts are joined with a newline, in order.
 * - The confidence is the mean confidence of the words kept, 0..1.
 */

export interface ReadWord {
  readonly text: string
  /** 0..100, as the OCR engine reports it. */
  readonly confidence: number
}

/** One frame's reading: its lines, top to bottom, each a list of words. */
export type FrameReading = ReadonlyArray<ReadonlyArray<ReadWord>>

export interface HookReading {
  readonly text: string
  /** 0..1 */
  readonly confidence: number
}

/** Two readings of one caption share at least this share of their words. */
const sameCaptionOverlap = 0.6

/** A longer hook line than this is cut (a frame full of text is not a hook). */
export const maxHookChars = 200

/** Lowercase words, letters and digits only: what two readings are compared on. */
export const wordsOf = (text: string): ReadonlyArray<string> => text.toLowerCase().match(/[a-z0-9]+(?:'[a-z]+)?/g) ?? []

/** A word worth keeping: holds a letter or digit (stray punctuation and border marks are noise). */
const isWord = (text: string) => /[A-Za-z0-9]/.test(text)

interface Caption {
  readonly text: string
  readonly words: ReadonlyArray<string>
  readonly confidenceSum: number
  readonly count: number
}

const meanConfidence = (caption: Caption) => caption.confidenceSum / caption.count

/** An upright bar among words is the word "I" (the engine often reads it as "|"); alone, it is a border mark. */
const asWord = (word: ReadWord): ReadWord => (word.text === "|" ? { ...word, text: "I" } : word)

/**
 * The word "I" is read with less confidence than longer words (an upright bar could be l, 1 or
 * |): it is kept from this much under the threshold (0..100).
 */
const oneLetterAllowance = 20

const isConfidentWord = (word: ReadWord, minConfidence: number) =>
  isWord(word.text) &&
  word.confidence >= minConfidence * 100 - (word.text === "I" ? oneLetterAllowance : 0)

/** A frame's caption: the confident words of its lines, in reading order; null when none is left. */
export const captionOf = (frame: FrameReading, minConfidence: number): Caption | null => {
  const kept = frame.flatMap((line) => {
    const amongWords = line.some((word) => word.text !== "|" && isConfidentWord(word, minConfidence))
    return (amongWords ? line.map(asWord) : line).filter((word) => isConfidentWord(word, minConfidence))
  })
  if (kept.length === 0) return null
  const text = kept.map((word) => word.text).join(" ")
  return {
    text,
    words: wordsOf(text),
    confidenceSum: kept.reduce((sum, word) => sum + word.confidence, 0),
    count: kept.length
  }
}

/** Mean word confidence (0..100) from which a frame's caption needs no second reading. */
const confidentReading = 85

/** How well a frame was read: the summed confidence of its confident words (0 when none). */
export const readingScore = (frame: FrameReading, minConfidence: number) => captionOf(frame, minConfidence)?.confidenceSum ?? 0

/** A frame read well enough to stop there: two confident words or more, confident on average. */
export const isConfident = (frame: FrameReading, minConfidence: number) => {
  const caption = captionOf(frame, minConfidence)
  return caption !== null && caption.count >= 2 && meanConfidence(caption) >= confidentReading
}

/** Share of the smaller word set found in the larger one. */
const overlap = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) => {
  const [small, large] = a.length <= b.length ? [a, b] : [b, a]
  if (small.length === 0) return 0
  const pool = new Set(large)
  return small.filter((word) => pool.has(word)).length / small.length
}

/** The better reading of one caption: the longer (a caption revealed word by word), else the more confident. */
const better = (a: Caption, b: Caption) =>
  b.words.length > a.words.length || (b.words.length === a.words.length && meanConfidence(b) > meanConfidence(a)) ? b : a

/** The hook line read from the frames, in frame order; null when no frame holds a confident word. */
export const mergeReadings = (frames: ReadonlyArray<FrameReading>, minConfidence: number): HookReading | null => {
  const sequence: Array<Caption> = []
  for (const frame of frames) {
    const caption = captionOf(frame, minConfidence)
    if (caption === null) continue
    const seen = sequence.findIndex((earlier) => overlap(earlier.words, caption.words) >= sameCaptionOverlap)
    if (seen === -1) sequence.push(caption)
    else sequence[seen] = better(sequence[seen], caption)
  }
  if (sequence.length === 0) return null
  const confidenceSum = sequence.reduce((sum, caption) => sum + caption.confidenceSum, 0)
  const count = sequence.reduce((sum, caption) => sum + caption.count, 0)
  return {
    text: sequence.map((caption) => caption.text).join("\n").slice(0, maxHookChars),
    confidence: Math.round(confidenceSum / count) / 100
  }
}
