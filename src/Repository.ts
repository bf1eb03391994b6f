/**
 * What every repository shares: its boundary, and the clock its statements are given. SQL and
 * decoding failures are defects at the boundary, and each method has its span in a traced fiber.
 * Every repository builds its methods as plain statements and hands them to `atRepoBoundary`
 * once; a repository's `test` layer (where it has one) offers the same methods in memory.
 */
import { Clock, Effect } from "effect"
import { traced } from "./Observability/Tracing.js"

/** A repository's methods as its callers see them: SQL and decoding failures are not theirs to handle. */
export type AtBoundary<T> = {
  readonly [K in keyof T]: T[K] extends (...args: infer Args) => Effect.Effect<infer A, infer _E> ? (...args: Args) => Effect.Effect<A>
    : never
}

/**
 * The repositories' boundary: a statement's SQL and decoding failures are defects (they roll
 * back the caller's transaction and become a logged 500), and each method has its span,
 * `<repo>.<method>`, in a traced fiber (Tracing.ts, `traced`).
 */
export const atRepoBoundary = <T extends Record<string, (...args: never) => Effect.Effect<unknown, unknown>>>(
  repo: string,
  statements: T
): AtBoundary<T> => {
  const bounded: Record<string, (...args: never) => Effect.Effect<unknown>> = {}
  for (const [name, run] of Object.entries(statements)) {
    bounded[name] = (...args) => run(...args).pipe(Effect.orDie, traced(`${repo}.${name}`))
  }
  return bounded as AtBoundary<T>
}

/** The current time, from Effect's Clock (a TestClock in tests): every timeout is measured on it. */
export const currentDate = Effect.map(Clock.currentTimeMillis, (millis) => new Date(millis))
