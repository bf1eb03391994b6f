/**
 * A caption's ink, whatever its style: the frames are read as colour, and what the OCR engine is
 * given is black ink on white, found by local contrast instead of one global threshold.
 *
 * - Brightness is each pixel's largest colour component (HSV value), so a blue or red caption is
 *   as bright as a white one (its luma is not: pure blue is darker than mid grey).
 * - Light ink (white, yellow, red, green, blue, pink text, with or without an outline): pixels
 *   brighter than the darkest pixel within a square a little wider than a thick caption stroke
 *   (the outline, or the footage around the text) by INK_CONTRAST, and brighter than the middle
 *   between that darkest and the brightest pixel there: a local threshold, so a yellow caption
 *   over dark footage and a white one over grey footage are both ink, and a wide bright area with
 *   nothing darker near it (sky, a wall) is not.
 * - Dark ink (black text on a light box or light footage): the same, darker than its surroundings.
 *
 * HookReader reads a frame in light ink first and tries dark ink when that gives no confident
 * caption, keeping the reading that is more confident.
 */

import { type Picture, squareFilter } from "./SquareFilter.js"

export type Polarity = "light" | "dark"

/** How much brighter (or darker) than its surroundings a pixel must be to count as ink (0..255). */
export const INK_CONTRAST = 96

/** The square's side, as a share of the frame's shorter side: wider than a caption stroke. */
const WINDOW_SHARE = 1 / 24

/** Reads a binary PPM (P6, colour: the value channel) or PGM (P5, grey) with 8-bit samples; null otherwise. */
export const readNetpbm = (file: Uint8Array): Picture | null => {
  const header = /^(P[56])\s+(\d+)\s+(\d+)\s+(\d+)\s/.exec(new TextDecoder().decode(file.subarray(0, 64)))
  if (header === null || header[4] !== "255") return null
  const [width, height] = [Number(header[2]), Number(header[3])]
  const channels = header[1] === "P6" ? 3 : 1
  const data = file.subarray(header[0].length)
  if (data.length < width * height * channels) return null
  if (channels === 1) return { width, height, pixels: data.subarray(0, width * height) }
  const pixels = new Uint8Array(width * height)
  for (let i = 0, j = 0; i < pixels.length; i++, j += 3) pixels[i] = Math.max(data[j], data[j + 1], data[j + 2])
  return { width, height, pixels, colour: data.subarray(0, width * height * 3) }
}

/** A PGM file of the picture. */
export const writePgm = (picture: Picture): Uint8Array => {
  const header = new TextEncoder().encode(`P5\n${picture.width} ${picture.height}\n255\n`)
  const file = new Uint8Array(header.length + picture.pixels.length)
  file.set(header)
  file.set(picture.pixels, header.length)
  return file
}

/** The largest glyph, as a share of the frame's shorter side (a 38-pixel caption on a 540-pixel-wide frame is 0.08). */
const GLYPH_SHARE = 1 / 6
/** Ink covers at least this share of a glyph's bounding box; a ring of footage around a caption covers less. */
const GLYPH_FILL = 0.12

/** A glyph stands out from nearly all of its surroundings; a strip of footage only from the caption side. */
const GLYPH_EDGE = 0.75

/** A piece of ink kept as a glyph: where it is, its pixels, and its mean colour. */
interface Glyph {
  readonly top: number
  readonly bottom: number
  readonly left: number
  readonly right: number
  readonly pixels: Int32Array
  readonly colour: readonly [number, number, number]
}

/** The mean colour of some pixels (the value channel three times over for a grey picture). */
const meanColour = (picture: Picture, at: ReadonlyArray<number>): readonly [number, number, number] => {
  const sums = [0, 0, 0]
  for (const i of at) {
    for (let c = 0; c < 3; c++) sums[c] += picture.colour === undefined ? picture.pixels[i] : picture.colour[i * 3 + c]
  }
  return [sums[0] / at.length, sums[1] / at.length, sums[2] / at.length]
}

/**
 * The connected pieces of ink that look like glyphs: at most GLYPH_SHARE of the frame tall
 * and wide, covering GLYPH_FILL of their box, and standing out (by half of INK_CONTRAST) from
 * GLYPH_EDGE of the pixels around them. Footage that passed the threshold beside a caption (a
 * bright wall behind yellow text, shadows around a white box) joins up into pieces larger than a
 * glyph, thin rings, or strips that stand out from the caption's outline on one side only. A
 * caption's outline or box keeps its letters apart from the footage, so they stay. The pieces
 * dropped are cleared from `ink`.
 */
const glyphsOf = (ink: Uint8Array, picture: Picture, polarity: Polarity): Array<Glyph> => {
  const { width, height, pixels } = picture
  const maxSide = Math.min(width, height) * GLYPH_SHARE
  const [sign, contrast] = [polarity === "light" ? 1 : -1, INK_CONTRAST / 2]
  const piece: Array<number> = []
  const glyphs: Array<Glyph> = []
  for (let start = 0; start < ink.length; start++) {
    if (ink[start] !== 1) continue
    // The piece is its own queue; a pixel taken into it is marked 2 in `ink`.
    piece.length = 0
    // Plain numbers, no destructuring: this loop runs for every pixel of ink.
    let top = height, bottom = 0, left = width, right = 0, edges = 0, standsOut = 0
    piece.push(start)
    ink[start] = 2
    for (let head = 0; head < piece.length; head++) {
      const at = piece[head]
      const y = (at / width) | 0
      const x = at - y * width
      if (y < top) top = y
      if (y > bottom) bottom = y
      if (x < left) left = x
      if (x > right) right = x
      for (let side = 0; side < 4; side++) {
        const next = side === 0 ? (x > 0 ? at - 1 : -1) : side === 1 ? (x < width - 1 ? at + 1 : -1) : side === 2 ? at - width : at + width
        if (next < 0 || next >= ink.length) continue
        if (ink[next] === 0) {
          edges++
          if ((pixels[at] - pixels[next]) * sign >= contrast) standsOut++
          continue
        }
        if (ink[next] === 2) continue
        ink[next] = 2
        piece.push(next)
      }
    }
    const [tall, wide] = [bottom - top + 1, right - left + 1]
    const glyph = tall <= maxSide && wide <= maxSide && piece.length >= GLYPH_FILL * tall * wide && standsOut >= GLYPH_EDGE * edges
    if (glyph) glyphs.push({ top, bottom, left, right, pixels: Int32Array.from(piece), colour: meanColour(picture, piece) })
    else for (const at of piece) ink[at] = 0
  }
  return glyphs
}

/** How far apart two pieces' mean colours are for one to be footage, not the caption (0..255, on any channel). */
const COUNTER_COLOUR = 48

/**
 * Drops the footage seen through a letter's counter: inside an outlined o, e or closed c, the
 * footage is ringed by the outline, so it stands out like a glyph and would turn the o into an
 * e. Such a piece lies within another piece's box and is not of its colour, or (whatever its
 * colour: footage as green as the caption) is enclosed by that one piece on the left, above and
 * below; the dot of an i next to an f is of the caption's colour, with its stem below it, and stays.
 */
const withoutCounters = (glyphs: ReadonlyArray<Glyph>, ink: Uint8Array, width: number) => {
  // A c's counter reaches its opening, where the outline closes it a little past the letter's box.
  const within = (inner: Glyph, outer: Glyph) => {
    const reach = Math.max(2, (outer.bottom - outer.top) / 6)
    return outer.top < inner.top && outer.bottom > inner.bottom && outer.left < inner.left && outer.right + reach >= inner.right &&
      (inner.right - inner.left) * 2 < outer.right - outer.left
  }
  const enclosing = enclosingPieces(glyphs, width, ink.length)
  const kept = glyphs.filter((inner, index) =>
    enclosing[index] === -1 &&
    !glyphs.some((outer) =>
      outer !== inner && within(inner, outer) && outer.colour.some((value, c) => Math.abs(value - inner.colour[c]) > COUNTER_COLOUR)
    )
  )
  for (const glyph of glyphs) if (!kept.includes(glyph)) for (const at of glyph.pixels) ink[at] = 0
  return kept
}

/**
 * For each piece, the piece that encloses it (or -1): the first ink met going left, up and down
 * from the piece's middle is that one other piece's, which is what footage in the counter of an
 * o, e or c looks like whatever its colour. The dot of an i has its own stem below it.
 */
const enclosingPieces = (glyphs: ReadonlyArray<Glyph>, width: number, size: number): Array<number> => {
  // Each pixel's piece plus one (0: no piece), so the array needs no filling.
  const owner = new Int32Array(size)
  glyphs.forEach((glyph, index) => {
    for (const at of glyph.pixels) owner[at] = index + 1
  })
  const firstMet = (from: number, step: number, steps: number, self: number) => {
    for (let at = from + step, n = 0; n < steps && at >= 0 && at < size; at += step, n++) {
      const found = owner[at] - 1
      if (found !== -1 && found !== self) return found
    }
    return -1
  }
  return glyphs.map((glyph, index) => {
    const [x, y] = [(glyph.left + glyph.right) >> 1, (glyph.top + glyph.bottom) >> 1]
    const reach = (glyph.bottom - glyph.top + 1) * 2 + 4
    const start = y * width + x
    if (owner[start] !== index + 1) return -1
    const left = firstMet(start, -1, Math.min(x, reach), index)
    if (left === -1) return -1
    const up = firstMet(start, -width, Math.min(y, reach), index)
    const down = firstMet(start, width, reach, index)
    return up === left && down === left ? left : -1
  })
}

const surroundingsOf = new WeakMap<Picture, { readonly darkest: Uint8Array; readonly brightest: Uint8Array }>()

/** The darkest and brightest pixel around each pixel, computed once a picture for both polarities. */
const surroundings = (picture: Picture) => {
  const known = surroundingsOf.get(picture)
  if (known !== undefined) return known
  const r = Math.max(2, Math.round(Math.min(picture.width, picture.height) * WINDOW_SHARE / 2))
  const computed = { darkest: squareFilter(picture, r, true), brightest: squareFilter(picture, r, false) }
  surroundingsOf.set(picture, computed)
  return computed
}

/**
 * The ink of one polarity as black (0) on white (255): a pixel at least INK_CONTRAST brighter
 * (light) or darker (dark) than the darkest (brightest) pixel around it, and past the middle
 * between the darkest and the brightest; then only the pieces of it the size of a glyph, and not
 * the footage in their counters. The picture handed on is the ink's box with a white margin of
 * the tallest glyph's height on every side (beyond the frame's border when the caption touches
 * it): the engine reads a line's first and last letters whole only with white space around them,
 * and reads a small picture faster than the whole frame. Null when there is no ink.
 */
export const inkOf = (picture: Picture, polarity: Polarity): Picture | null => {
  const { brightest, darkest } = surroundings(picture)
  const ink = new Uint8Array(picture.pixels.length)
  for (let i = 0; i < ink.length; i++) {
    const value = picture.pixels[i]
    const middle = (darkest[i] + brightest[i]) / 2
    const isInk = polarity === "light"
      ? value - darkest[i] >= INK_CONTRAST && value > middle
      : brightest[i] - value >= INK_CONTRAST && value < middle
    ink[i] = isInk ? 1 : 0
  }
  const glyphs = withoutCounters(glyphsOf(ink, picture, polarity), ink, picture.width)
  if (glyphs.length === 0) return null
  const box = glyphs.reduce((b, g) => ({
    top: Math.min(b.top, g.top),
    bottom: Math.max(b.bottom, g.bottom),
    left: Math.min(b.left, g.left),
    right: Math.max(b.right, g.right),
    tallest: Math.max(b.tallest, g.bottom - g.top + 1)
  }), { top: picture.height, bottom: 0, left: picture.width, right: 0, tallest: 0 })
  const margin = Math.max(MIN_MARGIN, box.tallest)
  const [x0, y0] = [box.left - margin, box.top - margin]
  const [width, height] = [box.right - box.left + 1 + 2 * margin, box.bottom - box.top + 1 + 2 * margin]
  const pixels = new Uint8Array(width * height).fill(255)
  for (let y = Math.max(0, y0); y < Math.min(picture.height, y0 + height); y++) {
    for (let x = Math.max(0, x0); x < Math.min(picture.width, x0 + width); x++) {
      if (ink[y * picture.width + x] !== 0) pixels[(y - y0) * width + (x - x0)] = 0
    }
  }
  return { width, height, pixels }
}

/** The smallest white margin around the ink handed on (pixels). */
const MIN_MARGIN = 12
