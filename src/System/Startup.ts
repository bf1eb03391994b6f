/**
 * Start-up work the process must finish before it is ready: on an embedded first start, the demo
 * account and catalog. /readyz answers 503 saying what is pending until `finish`, so a probe that
 * saw 200 never sees the demo data missing. Processes that do no such work (the tests' servers)
 * are ready at once: the default has nothing pending.
 */
import { Context } from "effect"

export interface StartupWork {
  /** What the process is still doing before it is ready, or null once it is. */
  readonly pending: () => string | null
  readonly finish: () => void
}

export const makeStartupWork = (what: string): StartupWork => {
  let pending: string | null = what
  return {
    pending: () => pending,
    finish: () => {
      pending = null
    }
  }
}

export const StartupWork = Context.Reference<StartupWork>("hookline/StartupWork", {
  defaultValue: () => ({ pending: () => null, finish: () => {} })
})
