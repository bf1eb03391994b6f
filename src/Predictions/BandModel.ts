/**
 * The band model: how the default scorer turns what it measured in a clip's opening into
 * `low`, `medium` or `high`. Deterministic (the same measurements always give the same band)
 * and deliberately simple, so the README can say exactly what a band means.
 *
 * Points:
 * - Pace of the hook (0–2): the first hard cut (`hook_duration_sec`) compared with the catalog's
 *   hooks. A cut no later than the catalog's lower tercile (FAST_HOOK_SEC) gives 2 points, one no
 *   later than its upper tercile (STEADY_HOOK_SEC) gives 1, a later cut or none in the opening 0.
 * - Motion (0–1): the opening's mean luma change between consecutive frames, normalised to
 *   30 frames per second, of at least MOTION_ACTIVE (on the 0–255 scale) gives 1 point.
 * - Sound (0–1): an audio track whose integrated loudness over the opening is at least
 *   AUDIBLE_LUFS gives 1 point (silence and no audio give 0).
 *
 * Band: 3–4 points → high, 2 → medium, 0–1 → low.
 *
 * Calibration: the two hook thresholds are the terciles of `hook_duration_sec` in the hook
 * catalog the service ships with (the demo catalog, src/Hooks/DemoData.ts: 2.5 s and 4.2 s), so
 * "fast" means a first cut sooner than in two thirds of the catalog's hooks. They are constants,
 * not recomputed from the live catalog, so a band never changes when the catalog does. MOTION_ACTIVE separates a static or slow shot (talking head, slide:
 * about 0–3) from handheld or moving footage; AUDIBLE_LUFS is 13 LU under the usual −14 LUFS
 * streaming target, a level of clearly audible speech or music.
 *
 * What the band is not: a prediction of views or engagement. It rates how quickly and how
 * energetically a clip opens, measured from the file alone.
 *
 * The hook read on screen (hook_text, similar_hooks, category) does not move the band. Reading is
 * best effort under a time cap (a busy process may give up where an idle one reads), and what the
 * neighbours score depends on the live catalog; the band must stay the same for the same file.
 * The reading is reported beside the band for the creator to weigh.
 */
import type { Band } from "./Domain.js"

/** Lower and upper terciles of `hook_duration_sec` in the demo catalog (2,000 hooks, default seed). */
export const FAST_HOOK_SEC = 2.5
export const STEADY_HOOK_SEC = 4.2
export const MOTION_ACTIVE = 4.0
export const AUDIBLE_LUFS = -27

export interface OpeningFeatures {
  /** Seconds from the first frame to the first hard cut in the opening; null when there is none. */
  readonly hookDurationSec: number | null
  /** Mean luma change per frame (0–255), normalised to 30 frames per second. */
  readonly motion: number
  /** Integrated loudness of the opening in LUFS; null without an audio track. */
  readonly loudnessLufs: number | null
}

export const pacePoints = (hookDurationSec: number | null): number =>
  hookDurationSec === null ? 0 : hookDurationSec <= FAST_HOOK_SEC ? 2 : hookDurationSec <= STEADY_HOOK_SEC ? 1 : 0

export const bandPoints = (features: OpeningFeatures): number =>
  pacePoints(features.hookDurationSec) +
  (features.motion >= MOTION_ACTIVE ? 1 : 0) +
  (features.loudnessLufs !== null && features.loudnessLufs >= AUDIBLE_LUFS ? 1 : 0)

export const bandOf = (features: OpeningFeatures): Band => {
  const points = bandPoints(features)
  return points >= 3 ? "high" : points === 2 ? "medium" : "low"
}
