/**
 * Response headers that belong to an endpoint's answer (X-Credits-*), as opposed to those of the
 * request path (X-Request-Id, rate limits). They are set on the response by a pre-response
 * handler and, inside `idempotent(...)`, also noted, so the stored answer carries them and a
 * replay answers with them.
 */
import { Context, Effect } from "effect"
import { HttpEffect, HttpServerResponse } from "effect/http"

/** Where `idempotent(...)` collects its effect's answer headers (lower-case names); null outside it. */
export const AnswerHeaders = Context.Reference<Record<string, string> | null>("hookline/AnswerHeaders", {
  defaultValue: () => null
})

/** Adds `headers` (lower-case names) to the response, and to the stored answer inside `idempotent(...)`. */
export const addAnswerHeaders = (headers: Readonly<Record<string, string>>) =>
  Effect.flatMap(AnswerHeaders, (collected) => {
    if (collected !== null) Object.assign(collected, headers)
    return HttpEffect.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeaders(response, headers)))
  })
