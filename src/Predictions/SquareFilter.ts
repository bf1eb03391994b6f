/**
 * The darkest or brightest pixel around each pixel of a picture (a square min or max filter),
 * in time independent of the square's size: what CaptionInk.ts measures a pixel's contrast against.
 */
/** A frame as the reader sees it. */
export interface Picture {
  readonly width: number
  readonly height: number
  /** One byte a pixel, row by row. */
  readonly pixels: Uint8Array
  /** Three bytes a pixel (red, green, blue), row by row, when the frame was read in colour. */
  readonly colour?: Uint8Array
}

/**
 * The darkest sample over a window of `2r + 1` along each row (van Herk / Gil-Werman: three passes,
 * whatever the window), then along each column, the columns taken a whole row at a time so the
 * memory is read in order.
 */
const erode = (source: Uint8Array, width: number, height: number, r: number): Uint8Array => {
  const k = 2 * r + 1
  const size = width * height
  const forward = new Uint8Array(size)
  const backward = new Uint8Array(size)
  const rows = new Uint8Array(size)
  for (let y = 0; y < height; y++) {
    const base = y * width
    for (let x = 0; x < width; x++) {
      const v = source[base + x]
      if (x % k === 0) forward[base + x] = v
      else {
        const before = forward[base + x - 1]
        forward[base + x] = v < before ? v : before
      }
    }
    for (let x = width - 1; x >= 0; x--) {
      const v = source[base + x]
      if (x === width - 1 || (x + 1) % k === 0) backward[base + x] = v
      else {
        const after = backward[base + x + 1]
        backward[base + x] = v < after ? v : after
      }
    }
    for (let x = 0; x < width; x++) {
      const from = backward[base + (x > r ? x - r : 0)]
      const to = forward[base + (x + r < width ? x + r : width - 1)]
      rows[base + x] = from < to ? from : to
    }
  }
  for (let y = 0; y < height; y++) {
    const base = y * width
    if (y % k === 0) forward.set(rows.subarray(base, base + width), base)
    else {
      for (let x = 0; x < width; x++) {
        const v = rows[base + x]
        const before = forward[base - width + x]
        forward[base + x] = v < before ? v : before
      }
    }
  }
  for (let y = height - 1; y >= 0; y--) {
    const base = y * width
    if (y === height - 1 || (y + 1) % k === 0) backward.set(rows.subarray(base, base + width), base)
    else {
      for (let x = 0; x < width; x++) {
        const v = rows[base + x]
        const after = backward[base + width + x]
        backward[base + x] = v < after ? v : after
      }
    }
  }
  for (let y = 0; y < height; y++) {
    const from = (y > r ? y - r : 0) * width
    const to = (y + r < height ? y + r : height - 1) * width
    const base = y * width
    for (let x = 0; x < width; x++) {
      const up = backward[from + x]
      const down = forward[to + x]
      rows[base + x] = up < down ? up : down
    }
  }
  return rows
}

/** The darkest (or, on the negative, the brightest) pixel within a square of side `2r + 1`. */
export const squareFilter = (picture: Picture, r: number, darkest: boolean): Uint8Array => {
  const { height, pixels, width } = picture
  if (darkest) return erode(pixels, width, height, r)
  const negative = new Uint8Array(pixels.length)
  for (let i = 0; i < negative.length; i++) negative[i] = 255 - pixels[i]
  const out = erode(negative, width, height, r)
  for (let i = 0; i < out.length; i++) out[i] = 255 - out[i]
  return out
}
