/**
 * Webhook settings, from the environment, with the contract's values as defaults
 * (docs/configuration.md). Durations accept the short form ("5s", "100ms", "2h") or
 * Effect's ("5 seconds").
 */
import { Config, Duration, Effect, Option, Result, Schema } from "effect"
import { countSetting, invalidSetting } from "../Config.js"

const shortDuration = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$/
const unitMillis: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }

const decodeEffectDuration = Schema.decodeUnknownOption(Schema.DurationFromString)

/** "5s", "100ms", "2h", or any form Effect's Duration understands ("5 seconds"). */
export const parseDuration = (text: string): Option.Option<Duration.Duration> => {
  const trimmed = text.trim()
  const short = shortDuration.exec(trimmed)
  if (short !== null) return Option.some(Duration.millis(Number(short[1]) * unitMillis[short[2]]))
  return decodeEffectDuration(trimmed)
}

const duration = (name: string, fallback: Duration.Duration) =>
  Config.String(name).pipe(
    Config.mapEffect((text) =>
      Option.match(parseDuration(text), {
        onNone: () => invalidSetting(`${name}: "${text}" is not a duration (e.g. 5s, 100ms, 2h)`),
        onSome: Effect.succeed
      })
    ),
    Config.withDefault(fallback)
  )

/** Retry delays after each failed attempt; the delivery fails after the last one. */
export const defaultRetrySchedule = "5s,5m,30m,2h,5h,10h,10h"

export const parseRetrySchedule = (text: string): Result.Result<ReadonlyArray<Duration.Duration>, string> => {
  const parts = text.split(",").map((part) => part.trim()).filter((part) => part !== "")
  const delays: Array<Duration.Duration> = []
  for (const part of parts) {
    const delay = parseDuration(part)
    if (Option.isNone(delay)) return Result.fail(`"${part}" is not a duration (e.g. 5s, 5m, 2h)`)
    delays.push(delay.value)
  }
  return Result.succeed(delays)
}

export const WebhookConfig = Config.all({
  /** Allow targets in private, loopback, link-local and reserved ranges (local development, tests). */
  allowPrivate: Config.Boolean("WEBHOOK_ALLOW_PRIVATE").pipe(Config.withDefault(false)),
  /** Allow plain http:// targets (local development, tests). */
  allowInsecure: Config.Boolean("WEBHOOK_ALLOW_INSECURE").pipe(Config.withDefault(false)),
  /** Time allowed for one delivery attempt: name resolution, connection, and the answer's headers. */
  timeout: duration("WEBHOOK_TIMEOUT", Duration.seconds(10)),
  /** Time allowed to resolve the host name when a URL is set. */
  resolveTimeout: duration("WEBHOOK_RESOLVE_TIMEOUT", Duration.seconds(5)),
  retrySchedule: Config.String("WEBHOOK_RETRY_SCHEDULE").pipe(
    Config.withDefault(defaultRetrySchedule),
    Config.mapEffect((text) =>
      Result.match(parseRetrySchedule(text), {
        onFailure: (message) => invalidSetting(`WEBHOOK_RETRY_SCHEDULE: ${message}`),
        onSuccess: Effect.succeed
      })
    )
  ),
  /** After a rotation, deliveries are also signed with the previous secret for this long. */
  previousSecretTtl: duration("WEBHOOK_PREVIOUS_SECRET_TTL", Duration.hours(24)),
  /** How often an idle dispatcher looks for due deliveries (LISTEN/NOTIFY wakes it sooner on Postgres). */
  pollInterval: duration("WEBHOOK_POLL_INTERVAL", Duration.seconds(1)),
  /**
   * How long a claimed delivery stays reserved for the dispatcher that claimed it. A process
   * that dies mid-attempt leaves its claims to others once this passes; never shorter than the
   * attempt timeout plus a second.
   */
  claimLease: duration("WEBHOOK_CLAIM_LEASE", Duration.seconds(60)),
  /** Deliveries (and their attempts) are kept this long, then swept. */
  deliveryRetention: duration("WEBHOOK_DELIVERY_RETENTION", Duration.days(30)),
  /** A webhook whose every attempt has failed for this long is disabled (disabled_reason "failing"). */
  disableAfter: duration("WEBHOOK_DISABLE_AFTER", Duration.days(5)),
  /** How often old deliveries are swept. */
  sweepInterval: duration("WEBHOOK_SWEEP_INTERVAL", Duration.hours(1)),
  /** The gap between the attempts of deliveries queued again by a recovery. */
  recoverPace: duration("WEBHOOK_RECOVER_PACE", Duration.millis(100)),
  /** Deliveries one process attempts at the same time. */
  concurrency: countSetting("WEBHOOK_DISPATCH_CONCURRENCY", 16)
})
export type WebhookConfig = Config.Success<typeof WebhookConfig>

/** The lease actually used: long enough to outlast one attempt. */
export const effectiveLease = (config: WebhookConfig): Duration.Duration =>
  Duration.max(config.claimLease, Duration.sum(config.timeout, Duration.seconds(1)))
