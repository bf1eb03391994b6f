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

/**
 * Inside `idempotent(...)` with a key: stores a success value as the key's answer in the caller's
 * transaction (Http.ts). Null outside, or without a key.
 */
export const StoreAnswer = Context.Reference<((value: unknown) => Effect.Effect<void>) | null>("hookline/StoreAnswer", {
  defaultValue: () => null
})

/**
 * Stores `value`, the effect's answer, as its Idempotency-Key's answer, in the transaction this
 * runs in: the answer commits with what the request changed or not at all, so a retry after a
 * connection lost at COMMIT replays it instead of running again. Does nothing without a key.
 * `headers` (lower-case names) are stored with it but not yet set on the response: the caller
 * adds them with `addAnswerHeaders` once the transaction has committed, so a failed COMMIT's
 * answer never carries them.
 */
export const answerInTransaction = <A>(value: A, headers: Readonly<Record<string, string>> = {}): Effect.Effect<A> =>
  Effect.flatMap(StoreAnswer, (store) =>
    store === null ? Effect.succeed(value) : Effect.flatMap(AnswerHeaders, (collected) => {
      if (collected !== null) Object.assign(collected, headers)
      return Effect.as(store(value), value)
    }))

/** Adds `headers` (lower-case names) to the response, and to the stored answer inside `idempotent(...)`. */
export const addAnswerHeaders = (headers: Readonly<Record<string, string>>) =>
  Effect.flatMap(AnswerHeaders, (collected) => {
    if (collected !== null) Object.assign(collected, headers)
    return HttpEffect.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeaders(response, headers)))
  })
