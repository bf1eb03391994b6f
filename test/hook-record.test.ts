/**
 * Import validation has two paths: a quick one for the common case and the Schema for the rest
 * (and for every rejection's wording). Whatever the quick path accepts, the Schema must accept
 * with exactly the same decoded record; otherwise an import would store what the contract refuses.
 */
import { describe, expect, test } from "bun:test"
import fc from "fast-check"
import { Option } from "effect"
import { demoHook } from "../src/Hooks/DemoData.js"
import { decodersForTest, validateHookRecord } from "../src/Hooks/HookRecord.js"

const { quick, schema } = decodersForTest

/** Values around every rule's edges: lengths, ranges, types, dates, nesting, extra keys. */
const text = (max: number) =>
  fc.oneof(fc.string({ maxLength: 3 }), fc.constantFrom(" ", "\t\n", "x".repeat(max), "x".repeat(max + 1), "é".repeat(max)), fc.integer(), fc.constant(null))
const amount = fc.oneof(fc.constantFrom(0, -0, -1, 0.5, 100, 101, 1e308, -1e-9), fc.double(), fc.string({ maxLength: 2 }), fc.constant(null))
const date = fc.oneof(
  fc.constantFrom("2025-06-01T12:00:00.000Z", "2025-06-01T12:00Z", "2025-02-03T04:05:06.789123+02:00", "2025-06-01", "2025-13-01T00:00:00Z", "yesterday", ""),
  fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  fc.integer(),
  fc.constant(null)
)
const emotions = fc.oneof(
  fc.record({
    inspiration: amount, fear: amount, curiosity: amount, satisfaction: amount, happiness: amount, anger: amount, surprise: amount
  }, { requiredKeys: [] }),
  fc.record({ inspiration: amount, fear: amount, curiosity: amount, satisfaction: amount, happiness: amount, anger: amount, surprise: amount, extra: amount }),
  fc.constant([1, 2]),
  fc.constant(null)
)
const themes = fc.oneof(
  fc.array(fc.oneof(fc.record({ word: text(200), count: amount }, { requiredKeys: [] }), fc.record({ word: text(200), count: amount, x: fc.integer() }), fc.constant(null)), { maxLength: 3 }),
  fc.constant({ word: "x", count: 1 }),
  fc.constant(null)
)
const overrides = fc.record({
  id: fc.oneof(fc.constantFrom("hook_0123456789abcdef0123456789abcdef", "hook_0123456789ABCDEF0123456789ABCDEF", "hook_1", ""), fc.integer()),
  text: text(500),
  platform: text(64),
  media_type: text(64),
  thumbnail_url: text(2_048),
  category: fc.oneof(fc.constantFrom("fitness", "personal-finance", "a--b", "-a", "A", "", "x".repeat(65)), fc.constant(null), fc.integer()),
  hook_duration_sec: amount,
  published_at: date,
  source_url: text(2_048),
  caption: text(10_000),
  duration_sec: amount,
  summary: text(10_000),
  emotions,
  comment_themes: themes,
  metrics: fc.jsonValue({ maxDepth: 2 }),
  creator: fc.jsonValue({ maxDepth: 2 }),
  audio: fc.jsonValue({ maxDepth: 1 }),
  views: fc.integer()
}, { requiredKeys: [] })

/** A valid demo record with a few fields replaced by edge values, or removed. */
const record = fc.tuple(fc.nat(5_000), fc.option(overrides, { freq: 4 }), fc.array(fc.constantFrom("id", "text", "platform", "category", "emotions", "source_url", "published_at"), { maxLength: 2 }))
  .map(([index, replaced, removed]) => {
    const value: Record<string, unknown> = { ...JSON.parse(JSON.stringify(demoHook(index))), ...replaced }
    for (const key of removed) delete value[key]
    return value
  })

describe("the quick validation path", () => {
  test("accepts only what the Schema accepts, decoded identically", () => {
    let quickAccepted = 0
    fc.assert(
      fc.property(fc.oneof(record, fc.jsonValue({ maxDepth: 1 })), (value) => {
        const fast = quick(value)
        if (fast === undefined) return
        quickAccepted++
        const slow = schema(value)
        expect(Option.isSome(slow)).toBe(true)
        expect(fast).toEqual(Option.getOrThrow(slow))
      }),
      { numRuns: 5_000 }
    )
    // The generator must reach the quick path often, or the property says little.
    expect(quickAccepted).toBeGreaterThan(250)
  }, 60_000)

  test("takes the demo catalog's records, unchanged", () => {
    for (let index = 0; index < 2_000; index++) {
      const hook = demoHook(index)
      const value: unknown = JSON.parse(JSON.stringify(hook))
      expect(quick(value)).toEqual(hook)
      expect(validateHookRecord(value)).toEqual(validateHookRecord({ ...hook, published_at: hook.published_at }))
    }
  })
})
