/**
 * Rate limits (decisions.md, "Rate limits"): a token bucket per key by plan, and a limit on
 * failed authentication per client address. The store is in process by default and Redis when
 * REDIS_URL is set, so limits hold across several server processes sharing it.
 *
 * Every /v1 answer carries the IETF `RateLimit-Policy` and `RateLimit` headers; a 429 also
 * carries `Retry-After`. A limited request is refused before any reserve, so it is never charged.
 */
import { RateLimiter } from "@effect/experimental"
import * as RedisStore from "@effect/experimental/RateLimiter/Redis"
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Config, ConfigError, Duration, Effect, Either, Layer, Option } from "effect"
import type { Plan } from "../Auth/Domain.js"
import { wholeSeconds } from "../Durations.js"
import { InvalidApiKey, RateLimitExceeded } from "../Errors.js"
import { layerBoundedMemoryStore } from "./MemoryStore.js"

interface Bucket {
  readonly name: string
  /** Requests per second, sustained. */
  readonly rate: number
  readonly burst: number
}

/** A tier's bucket as `rate/burst` (requests per second / burst), decisions.md's values by default. */
const bucketConfig = (name: string, variable: string, fallback: string) =>
  Config.string(variable).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((text) => {
      const match = /^\s*(\d+(?:\.\d+)?)\s*\/\s*(\d+)\s*$/.exec(text)
      return match === null || Number(match[1]) <= 0 || Number(match[2]) < 1
        ? Either.left(ConfigError.InvalidData([], `${variable} must be "rate/burst", e.g. "${fallback}"`))
        : Either.right<Bucket>({ name, rate: Number(match[1]), burst: Number(match[2]) })
    })
  )

export const RateLimitConfig = Config.all({
  enabled: Config.boolean("RATE_LIMIT_ENABLED").pipe(Config.withDefault(true)),
  redisUrl: Config.option(Config.string("REDIS_URL")),
  failedAuthPerMinute: Config.integer("RATE_LIMIT_FAILED_AUTH_PER_MINUTE").pipe(Config.withDefault(20)),
  /** Most counters the in-process store keeps (keys and failing addresses); see MemoryStore.ts. */
  memoryEntries: Config.integer("RATE_LIMIT_MEMORY_ENTRIES").pipe(Config.withDefault(100_000)),
  pro: bucketConfig("pro", "RATE_LIMIT_PRO", "10/20"),
  business: bucketConfig("business", "RATE_LIMIT_BUSINESS", "50/100"),
  enterprise: bucketConfig("enterprise", "RATE_LIMIT_ENTERPRISE", "200/400")
})

const bucketFor = (plan: Plan, buckets: { readonly pro: Bucket; readonly business: Bucket; readonly enterprise: Bucket }): Bucket => {
  switch (plan) {
    case "enterprise":
      return buckets.enterprise
    case "business":
    case "invite":
    case "complimentary":
    case "custom":
      return buckets.business
    default:
      return buckets.pro
  }
}

const setHeaders = (headers: Record<string, string>) =>
  HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(HttpServerResponse.setHeaders(response, headers)))

export class RateLimits extends Effect.Service<RateLimits>()("hookline/RateLimits", {
  scoped: Effect.gen(function*() {
    const config = yield* RateLimitConfig
    // Built in this service's scope: the Redis connection lives as long as the server.
    const store = yield* Layer.build(
      Option.match(config.redisUrl, {
        onNone: () => layerBoundedMemoryStore(config.memoryEntries),
        onSome: (url) => RedisStore.layerStore({ ...parseRedisUrl(url), prefix: "hookline:ratelimit:" })
      })
    )
    const limiter = yield* RateLimiter.make.pipe(Effect.provide(store))

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

    /** The token bucket of the key's plan; 429 when it is empty. */
    const perKey = (keyId: string, plan: Plan) => {
      if (!config.enabled) return Effect.void
      const bucket = bucketFor(plan, config)
      const window = Duration.millis((bucket.burst / bucket.rate) * 1000)
      return consume(`key:${keyId}`, bucket.name, bucket.burst, window, "token-bucket").pipe(
        Effect.catchTag("RateLimiterError", (error) =>
          error.reason === "Exceeded"
            ? setHeaders({
              "retry-after": String(wholeSeconds(error.retryAfter, 1)),
              "ratelimit-policy": `"${bucket.name}";q=${bucket.burst};w=${wholeSeconds(window)}`,
              "ratelimit": `"${bucket.name}";r=0;t=${wholeSeconds(error.retryAfter, 1)}`
            }).pipe(
              Effect.zipRight(new RateLimitExceeded({ message: `Rate limit of ${bucket.rate} requests per second (burst ${bucket.burst}) exceeded.` }))
            )
            : Effect.logWarning("rate limit store unavailable; request allowed", error.message)
        )
      )
    }

    /**
     * Counts a failed authentication (a /v1 key or the /admin token) from `address`; past the
     * limit the 401 becomes a 429.
     */
    const failedAuthentication = (address: string): Effect.Effect<void, RateLimitExceeded | InvalidApiKey> => {
      if (!config.enabled) return Effect.void
      const window = Duration.minutes(1)
      return consume(`auth:${clientOf(address)}`, "failed-auth", config.failedAuthPerMinute, window, "fixed-window").pipe(
        Effect.catchTag("RateLimiterError", (error) =>
          error.reason === "Exceeded"
            ? setHeaders({ "retry-after": String(wholeSeconds(error.retryAfter, 1)) }).pipe(
              Effect.zipRight(new RateLimitExceeded({ message: "Too many failed authentication attempts from this address." }))
            )
            : Effect.logWarning("rate limit store unavailable; request allowed", error.message)
        )
      )
    }

    return { perKey, failedAuthentication } as const
  })
}) {}

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

const parseRedisUrl = (url: string) => {
  const parsed = new URL(url)
  return {
    host: parsed.hostname,
    port: parsed.port === "" ? 6379 : Number(parsed.port),
    ...(parsed.password === "" ? {} : { password: decodeURIComponent(parsed.password) }),
    ...(parsed.pathname.length > 1 ? { db: Number(parsed.pathname.slice(1)) } : {})
  }
}

