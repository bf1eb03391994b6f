/**
 * The in-process rate limit store (used when REDIS_URL is unset). It counts exactly as
 * `effect/persistence`'s `RateLimiter.layerStoreMemory`, whose maps only ever grow: one entry
 * per key and per client address that ever failed to authenticate, kept forever. Here an entry
 * that has run out (its window passed, its bucket refilled) counts as absent and is dropped, and
 * the store holds at most `capacity` entries: at the cap the spent entries are swept and, if that
 * is not enough, the oldest tenth is dropped (forgetting a counter early only ever lets a request
 * through). The sweep runs once per tenth of the cap, so its cost per request stays constant.
 *
 * Hookline limits only its own clients, so the adaptive half of the store interface (learning
 * an upstream's limit from its 429s) is inert: always "inactive", feedback ignored.
 */
import { Duration, Effect, Layer } from "effect"
import { RateLimiter } from "effect/persistence"

type Entry =
  | { readonly kind: "window"; count: number; expiresAt: number }
  | { readonly kind: "bucket"; tokens: number; lastRefill: number; readonly limit: number; readonly refillMillis: number }

/** True when the entry holds nothing a fresh one would not: its window ended, or its bucket is full again. */
const spent = (entry: Entry, now: number): boolean =>
  entry.kind === "window"
    ? entry.expiresAt <= now
    : entry.tokens + Math.floor((now - entry.lastRefill) / entry.refillMillis) >= entry.limit

export const makeBoundedMemoryStore = (capacity: number) => {
  const entries = new Map<string, Entry>()

  const makeRoom = (now: number) => {
    if (entries.size < capacity) return
    for (const [key, entry] of entries) if (spent(entry, now)) entries.delete(key)
    const target = Math.floor(capacity * 0.9)
    for (const key of entries.keys()) {
      if (entries.size <= target) break
      entries.delete(key)
    }
  }

  /** The live entry of `key` of the given kind, or undefined (a spent one is dropped). */
  const live = (key: string, kind: Entry["kind"], now: number): Entry | undefined => {
    const entry = entries.get(key)
    if (entry === undefined) return undefined
    if (entry.kind !== kind || spent(entry, now)) {
      entries.delete(key)
      return undefined
    }
    return entry
  }

  const store = RateLimiter.RateLimiterStore.of({
    fixedWindow: (options) =>
      Effect.clockWith((clock) =>
        Effect.sync(() => {
          const refillMillis = Duration.toMillis(options.refillRate)
          const now = clock.currentTimeMillisUnsafe()
          let counter = live(options.key, "window", now)
          if (counter === undefined || counter.kind !== "window") {
            makeRoom(now)
            counter = { kind: "window", count: 0, expiresAt: now }
            entries.set(options.key, counter)
          }
          if (options.limit !== undefined && counter.count + options.tokens > options.limit) {
            return [counter.count + options.tokens, counter.expiresAt - now] as const
          }
          counter.count += options.tokens
          counter.expiresAt += refillMillis * options.tokens
          return [counter.count, counter.expiresAt - now] as const
        })
      ),
    tokenBucket: (options) =>
      Effect.clockWith((clock) =>
        Effect.sync(() => {
          const refillMillis = Duration.toMillis(options.refillRate)
          const now = clock.currentTimeMillisUnsafe()
          let bucket = live(options.key, "bucket", now)
          if (bucket === undefined || bucket.kind !== "bucket") {
            makeRoom(now)
            bucket = { kind: "bucket", tokens: options.limit, lastRefill: now, limit: options.limit, refillMillis }
            entries.set(options.key, bucket)
          } else {
            const refilled = Math.floor((now - bucket.lastRefill) / refillMillis)
            if (refilled > 0) {
              bucket.tokens = Math.min(options.limit, bucket.tokens + refilled)
              bucket.lastRefill += refilled * refillMillis
            }
          }
          // A full bucket refills from now on, not from its last refill (as the Redis store does).
          if (bucket.tokens >= options.limit) bucket.lastRefill = now
          const left = bucket.tokens - options.tokens
          if (options.allowOverflow || left >= 0) bucket.tokens = left
          return [left, Math.max(0, now - bucket.lastRefill)] as const
        })
      ),
    adaptiveConsume: () => Effect.succeed({ delay: Duration.zero, epoch: 0, phase: "inactive" as const }),
    adaptiveFeedback: () => Effect.void
  })

  return { store, size: () => entries.size }
}

/** The bounded store as the RateLimiter's store layer. */
export const layerBoundedMemoryStore = (capacity: number): Layer.Layer<RateLimiter.RateLimiterStore> =>
  Layer.sync(RateLimiter.RateLimiterStore, () => makeBoundedMemoryStore(capacity).store)
