/**
 * One delivery attempt: check the URL (UrlPolicy), sign, POST, classify the answer. The POST
 * itself is the WebhookTransport service, so a test swaps in a fake receiver (no network).
 *
 * The request connects to an address the policy checked, not to whatever the name resolves
 * to a moment later: the URL's host is replaced by that address, the original host goes in the
 * Host header, and for https the TLS server name (SNI and certificate check) stays the host
 * name. When a connection cannot be made, the next checked address is tried (a host with a
 * broken IPv6 or IPv4 route still gets its events). Redirects are not followed (a 3xx is a
 * failed attempt), environment proxies are not used, and the whole attempt (resolution
 * included) has one timeout.
 */
import { Clock, Context, Duration, Effect, Layer } from "effect"
import { recordWebhookAttempt, webhookOutcome } from "../Observability/Metrics.js"
import type { WebhookConfig } from "./Config.js"
import { signatureHeaders } from "./Signing.js"
import { type Address, resolveTarget, type Target, type UrlRefused, type UrlRules } from "./UrlPolicy.js"

export interface AttemptOutcome {
  readonly delivered: boolean
  /** Null when no HTTP answer came (refused URL, connection failure, timeout). */
  readonly statusCode: number | null
  readonly durationMs: number
  /** Why the attempt failed, without the URL (it may carry the receiver's own tokens). */
  readonly error: string | null
  /** The wait a 429 or 503 asked for with Retry-After, in milliseconds (null: none or unreadable). */
  readonly retryAfterMs: number | null
}

export interface AttemptInput {
  readonly url: string
  /** Current secret first; the previous one too while its rotation window lasts. */
  readonly secrets: ReadonlyArray<string>
  readonly eventId: string
  readonly body: string
  /** A test send: marked with `hookline-test: true`, which a real delivery never carries. */
  readonly test?: boolean
}

/** The header that tells a receiver an event is a test send (its body is a made-up prediction). */
export const testSendHeader = "hookline-test"

export interface AttemptRules extends UrlRules {
  readonly timeout: Duration.Duration
  readonly resolveTimeout: Duration.Duration
}

/** The rules of this server's attempts, from its settings. */
export const attemptRules = (config: WebhookConfig): AttemptRules => ({
  allowInsecure: config.allowInsecure,
  allowPrivate: config.allowPrivate,
  timeout: config.timeout,
  resolveTimeout: config.resolveTimeout
})

const userAgent = "Hookline-Webhooks/1.0"

/** The URL to connect to: a checked address in place of the host name. */
const pinnedUrl = (target: Target, address: Address): string => {
  if (target.literal) return target.url.toString()
  const pinned = new URL(target.url.toString())
  pinned.hostname = address.family === 6 ? `[${address.address}]` : address.address
  return pinned.toString()
}

/** Retry-After as delay-seconds or an HTTP date, in milliseconds from `now`; null when absent or unreadable. */
export const parseRetryAfter = (value: string | null, now: number): number | null => {
  if (value === null) return null
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const date = Date.parse(text)
  return Number.isNaN(date) ? null : Math.max(0, date - now)
}

const errorCode = (cause: unknown): string | null =>
  typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string" ? cause.code : null

/** Failures that happen before anything is sent, so trying another address cannot deliver twice. */
const connectFailures = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL", "ConnectionRefused"])

/** What one POST came to: the receiver's answer, or why none came. */
export type PostResult =
  | { readonly _tag: "Answered"; readonly status: number; readonly retryAfterMs: number | null }
  | { readonly _tag: "Failed"; readonly error: string }
type Step = PostResult

/** A signed event on its way to a checked target. */
export interface WebhookRequest {
  readonly target: Target
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

const postTo = (target: Target, address: Address, headers: Readonly<Record<string, string>>, body: string) =>
  // A Retry-After date is read against Effect's Clock, like every delivery time.
  Effect.clockWith((clock) => Effect.tryPromise({
    try: async (signal) => {
      const response = await fetch(pinnedUrl(target, address), {
        method: "POST",
        headers: { ...headers, host: target.url.host },
        body,
        redirect: "manual",
        proxy: false,
        signal,
        ...(target.url.protocol === "https:" && !target.literal ? { tls: { serverName: target.url.hostname } } : {})
      })
      // The answer's body is not used; do not wait for it.
      await response.body?.cancel().catch(() => undefined)
      const retryAfterMs = response.status === 429 || response.status === 503
        ? parseRetryAfter(response.headers.get("retry-after"), clock.currentTimeMillisUnsafe())
        : null
      return { status: response.status, retryAfterMs }
    },
    catch: errorCode
  }))

const post = ({ body, headers, target }: WebhookRequest): Effect.Effect<PostResult> =>
  Effect.gen(function*() {
    let code: string | null = null
    for (const address of target.addresses) {
      const result = yield* Effect.result(postTo(target, address, headers, body))
      if (result._tag === "Success") return { _tag: "Answered", ...result.success } satisfies Step
      code = result.failure
      if (code === null || !connectFailures.has(code)) break
    }
    return { _tag: "Failed", error: code === null ? "connection failed" : `connection failed (${code})` } satisfies Step
  })

const outcome = (step: Step, durationMs: number): AttemptOutcome => {
  if (step._tag === "Failed") return { delivered: false, statusCode: null, durationMs, error: step.error, retryAfterMs: null }
  const status = step.status
  if (status >= 200 && status < 300) return { delivered: true, statusCode: status, durationMs, error: null, retryAfterMs: null }
  const error = status >= 300 && status < 400 ? `answered ${status}; redirects are not followed` : `answered ${status}`
  return { delivered: false, statusCode: status, durationMs, error, retryAfterMs: step.retryAfterMs }
}

/** The HTTP POST of an attempt; never fails (the result says what happened). */
export class WebhookTransport extends Context.Service<WebhookTransport, {
  readonly post: (request: WebhookRequest) => Effect.Effect<PostResult>
}>()("hookline/WebhookTransport") {
  /** The real POST, over fetch. */
  static readonly layer = Layer.succeed(WebhookTransport, WebhookTransport.of({ post }))
}

export interface Attempts {
  /** One attempt, the URL checked (and its host resolved) within the attempt's timeout. */
  readonly attempt: (input: AttemptInput) => Effect.Effect<AttemptOutcome>
  /** One attempt to a target the caller has just checked. */
  readonly attemptAt: (target: Target, input: AttemptInput) => Effect.Effect<AttemptOutcome>
}

/** Attempts under `rules` through `transport`. */
export const makeAttempts = (transport: WebhookTransport["Service"], rules: AttemptRules): Attempts => {
  /**
   * Sends one attempt: `check` yields the target (or the reason it is refused), then the event
   * is signed at the current second and posted. Never fails; the outcome says what happened.
   */
  const run = (check: Effect.Effect<Target, UrlRefused>, input: AttemptInput): Effect.Effect<AttemptOutcome> =>
    Effect.gen(function*() {
      const started = yield* Clock.currentTimeMillis
      const step = yield* Effect.gen(function*() {
        const checked = yield* Effect.result(check)
        if (checked._tag === "Failure") return { _tag: "Failed", error: `url refused: ${checked.failure.message}` } satisfies Step
        const seconds = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        const headers = {
          "content-type": "application/json",
          "user-agent": userAgent,
          ...signatureHeaders(input.secrets, input.eventId, seconds, input.body),
          ...(input.test === true ? { [testSendHeader]: "true" } : {})
        }
        return yield* transport.post({ target: checked.success, headers, body: input.body })
      }).pipe(
        Effect.timeoutOrElse({
          duration: rules.timeout,
          orElse: () => Effect.succeed<Step>({ _tag: "Failed", error: `timed out after ${Duration.format(rules.timeout)}` })
        })
      )
      const result = outcome(step, (yield* Clock.currentTimeMillis) - started)
      yield* recordWebhookAttempt(webhookOutcome(result.statusCode), result.durationMs / 1000)
      return result
    })

  return {
    attempt: (input) => run(resolveTarget(input.url, rules, rules.resolveTimeout), input),
    attemptAt: (target, input) => run(Effect.succeed(target), input)
  }
}
