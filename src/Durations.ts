/**
 * Durations on the wire. Fractional seconds (Postgres's `make_interval(secs => …)`) are Effect's
 * `Duration.toSeconds`; what HTTP counts in whole seconds is here.
 */
import { Duration } from "effect"

/** Whole seconds, rounded up and at least `atLeast`: Retry-After, RateLimit fields, presigned URL lifetimes. */
export const wholeSeconds = (duration: Duration.Input, atLeast = 0): number =>
  Math.max(atLeast, Math.ceil(Duration.toSeconds(duration)))
