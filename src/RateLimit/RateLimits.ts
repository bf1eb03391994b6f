/**
 * Rate limits (docs/behaviour.md, "Rate limits"): a token bucket per key by plan, and a limit on
 * failed authentication per client address, counted by `effect/persistence`'s RateLimiter. The
 * store is in process by default (MemoryStore.ts) and Redis when REDIS_URL is set (BunRedis.ts),
 * so limits hold across several server processes sharing it; while Redis does not answer, each
 * process counts in its own store (FailoverStore.ts).
 *
 * Every /v1 answer carries the IETF `RateLimit-Policy` and `RateLimit` headers; a 429 also
 * carries `Retry-After`. A limited request is refused before any reserve, so it is never charged.
 */
import { Config, Context, Duration, Effect, Layer, Option } from "effect"
import { HttpEffect, HttpServerResponse } from "effect/http"
import { RateLimiter, Redis } from "effect/persistence"
import { invalidSetting } from "../Config.js"
import { wholeSeconds } from "../Durations.js"
import { type InvalidApiKey, RateLimitExceeded } from "../Errors.js"
import { makeBunRedis } from "./BunRedis.js"
import { makeFailoverStore } from "./FailoverStore.js"
import { makeBoundedMemoryStore } from "./MemoryStore.js"

/** The request-rate tiers; which plan is on which is Auth/Plans.ts's rule. */
export type RateTier = "pro" | "business" | "enterprise"

interface Bucket {
  readonly name: string
  /** Requests per second, sustained. */
  readonly rate: number
  readonly burst: number
}

/** A tier's bucket as `rate/burst` (requests per second / burst), docs/behaviour.md's values by default. */
const bucketConfig = (name: string, variable: string, fallback: string) =>
  Config.String(variable).pipe(
    Config.withDefault(fallback),
    Config.mapEffect((text) => {
      const match = /^\s*(\d+(?:\.\d+)?)\s*\/\s*(\d+)\s*$/.exec(text)
      return match === null || Number(match[1]) <= 0 || Number(match[2]) < 1
        ? invalidSetting(`${variable} must be "rate/burst", e.g. "${fallback}"`)
        : Effect.succeed<Bucket>({ name, rate: Number(match[1]), burst: Number(match[2]) })
    })
  )

export const RateLimitConfig = Config.all({
  enabled: Config.Boolean("RATE_LIMIT_ENABLED").pipe(Config.withDefault(true)),
  redisUrl: Config.option(Config.String("REDIS_URL")),
  failedAuthPerMinute: Config.Int("RATE_LIMIT_FAILED_AUTH_PER_MINUTE").pipe(Config.withDefault(20)),
  /** Most counters the in-process store keeps (keys and failing addresses); see MemoryStore.ts. */
  memoryEntries: Config.Int("RATE_LIMIT_MEMORY_ENTRIES").pipe(Config.withDefault(100_000)),
  pro: bucketConfig("pro", "RATE_LIMIT_PRO", "10/20"),
  business: bucketConfig("business", "RATE_LIMIT_BUSINESS", "50/100"),
  enterprise: bucketConfig("enterprise", "RATE_LIMIT_ENTERPRISE", "200/400")
})

/** Adds headers to the answer of the request this fiber serves (nothing outside a request). */
const setHeaders = (headers: Record<string, string>) =>
  Effect.withFiber((fiber) => {
    HttpEffect.appendPreResponseHandlerUnsafe(fiber.context, (_request, response) => Effect.succeed(HttpServerResponse.setHeaders(response, headers)))
    return Effect.void
  })

/**
 * The store: Redis when REDIS_URL is set (its connection lives as long as the server, and the
 * in-process store stands in while Redis does not answer: FailoverStore.ts), else in process.
 */
const makeStore = (config: Config.Success<typeof RateLimitConfig>) =>
  Option.match(config.redisUrl, {
    onNone: () => Effect.succeed({ store: makeBoundedMemoryStore(config.memoryEntries).store, fallingBack: () => false }),
    onSome: (url) =>
      Effect.gen(function*() {
        const { pingFresh, redis, renew } = yield* makeBunRedis(url)
        const primary = yield* RateLimiter.makeStoreRedis({ prefix: "hookline:ratelimit:" }).pipe(Effect.provideService(Redis.Redis, redis))
        return yield* makeFailoverStore({
          primary,
          fallback: makeBoundedMemoryStore(config.memoryEntries).store,
          probe: pingFresh,
          renew
        })
      })
  })

const storeUnavailable = (error: RateLimiter.RateLimitStoreError) =>
  Effect.logWarning("rate limit store unavailable; request allowed", error.message)

/** What the rate limits offer: a key's bucket, the failed-authentication count, and where counting happens. */
export interface RateLimitsService {
  /** The token bucket of the key's rate tier; 429 when it is empty. */
  readonly perKey: (keyId: string, tier: RateTier) => Effect.Effect<void, RateLimitExceeded>
  /** Counts a failed authentication from `address`; past the limit the 401 becomes a 429. */
  readonly failedAuthentication: (address: string) => Effect.Effect<void, RateLimitExceeded | InvalidApiKey>
  /** What /readyz reports: null when limits are counted where configured, else why they are not. */
  readonly degradation: () => string | null
  /** Where this process counts: in Redis, in process while Redis does not answer, or in process by configuration. */
  readonly storeMode: () => "redis" | "local_fallback" | "memory"
}

const make = Effect.gen(function*() {
  const config = yield* RateLimitConfig
  // Built in this service's scope: a Redis connection lives as long as the server.
  const { fallingBack, store } = yield* makeStore(config)
  const limiter = yield* RateLimiter.make.pipe(Effect.provideService(RateLimiter.RateLimiterStore, store))

  const consume = (key: string, policy: string, limit: number, window: Duration.Duration, algorithm: "token-bucket" | "fixed-window") =>
    limiter.consume({ key, limit, window, algorithm, onExceeded: "fail" }).pipe(
      Effect.tap((result) =>
        setHeaders({
          "ratelimit-policy": `"${policy}";q=${limit};w=${wholeSeconds(window)}`,
          "ratelimit": `"${policy}";r=${result.remaining};t=${wholeSeconds(result.resetAfter)}`
        })
      ),
      Effect.asVoid
    )

  /** The token bucket of the key's rate tier (its plan's, Auth/Plans.ts); 429 when it is empty. */
  const perKey = (keyId: string, tier: RateTier): Effect.Effect<void, RateLimitExceeded> => {
    if (!config.enabled) return Effect.void
    const bucket = config[tier]
    const window = Duration.millis((bucket.burst / bucket.rate) * 1000)
    return consume(`key:${keyId}`, bucket.name, bucket.burst, window, "token-bucket").pipe(
      Effect.catchTag("RateLimiterError", ({ reason }) =>
        reason._tag === "RateLimitExceeded"
          ? setHeaders({
            "retry-after": String(wholeSeconds(reason.retryAfter, 1)),
            "ratelimit-policy": `"${bucket.name}";q=${bucket.burst};w=${wholeSeconds(window)}`,
            "ratelimit": `"${bucket.name}";r=0;t=${wholeSeconds(reason.retryAfter, 1)}`
          }).pipe(
            Effect.andThen(new RateLimitExceeded({ message: `Rate limit of ${bucket.rate} requests per second (burst ${bucket.burst}) exceeded.` }))
          )
          : storeUnavailable(reason)
      )
    )
  }

  /**
   * Counts a failed authentication (a /v1 key, the /admin token, the metrics token) from
   * `address`; past the limit the 401 becomes a 429.
   */
  const failedAuthentication = (address: string): Effect.Effect<void, RateLimitExceeded | InvalidApiKey> => {
    if (!config.enabled) return Effect.void
    const window = Duration.minutes(1)
    return consume(`auth:${clientOf(address)}`, "failed-auth", config.failedAuthPerMinute, window, "fixed-window").pipe(
      Effect.catchTag("RateLimiterError", ({ reason }) =>
        reason._tag === "RateLimitExceeded"
          ? setHeaders({ "retry-after": String(wholeSeconds(reason.retryAfter, 1)) }).pipe(
            Effect.andThen(new RateLimitExceeded({ message: "Too many failed authentication attempts from this address." }))
          )
          : storeUnavailable(reason)
      )
    )
  }

  /** What /readyz reports: null when limits are counted where configured, else why they are not. */
  const degradation = (): string | null =>
    fallingBack() ? "rate_limit_store: Redis does not answer; each process counts its own limits until it does" : null

  /** Where this process counts: in Redis, in process while Redis does not answer, or in process by configuration. */
  const storeMode = (): "redis" | "local_fallback" | "memory" =>
    Option.isNone(config.redisUrl) ? "memory" : fallingBack() ? "local_fallback" : "redis"

  return RateLimits.of({ perKey, failedAuthentication, degradation, storeMode })
})

export class RateLimits extends Context.Service<RateLimits, RateLimitsService>()("hookline/RateLimits") {
  static readonly layer = Layer.effect(RateLimits, make)
}

/**
 * Whom a failed authentication is counted against: the IPv4 address (also when IPv4-mapped), or
 * the IPv6 /64, since one client normally holds a whole /64 and could otherwise try 2^64 times.
 */
export const clientOf = (address: string): string => {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address)
  if (mapped !== null) return mapped[1]
  if (!address.includes(":")) return address
  const [head = "", tail] = address.split("%")[0].split("::")
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const groups = tail === undefined ? left : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right]
  return `${groups.slice(0, 4).map((group) => parseInt(group, 16).toString(16)).join(":")}::/64`
}
