/**
 * The Idempotency-Key contract, documented on each POST endpoint that honours it with
 * `.annotate(OpenApi.Transform, acceptsIdempotencyKey)`. The header is read and checked by
 * `idempotent(...)` (Http.ts), after authentication and payload validation.
 */
import { Predicate } from "effect"

/** 1 to 255 printable ASCII characters (space to tilde). */
export const idempotencyKeyPattern = /^[\x20-\x7E]{1,255}$/

export const idempotencyKeyRule = "must be 1 to 255 printable ASCII characters"

const description =
  "Makes a retry safe (Stripe semantics). The first successful answer to a key is kept 24 hours with a " +
  "fingerprint of method, path and body; a repeat replays its status, body and X-Credits-* headers with " +
  "`Idempotent-Replayed: true` and has no second effect. A concurrent repeat waits for the first and replays it. " +
  "The same key with another method, path or body is 422 validation_error. Error answers are not kept (they " +
  "changed nothing), so a retry after one runs again; except a 503 saying the outcome is unknown (the connection was " +
  "lost at COMMIT): the key stays held, and a retry replays the answer if it committed, or runs once after the key's lock timed out. Keys are scoped to the API key (to the admin token on /admin): another key of the same account never replays this key's answers."

/**
 * OpenApi.Transform for an endpoint: documents the request header and the replay header. The
 * operation object is mutated in place (its `parameters`, and the headers of its 200 response).
 */
export const acceptsIdempotencyKey = (spec: Record<string, unknown>): Record<string, unknown> => {
  const parameters: ReadonlyArray<unknown> = Array.isArray(spec.parameters) ? spec.parameters : []
  spec.parameters = [
    ...parameters,
    {
      name: "Idempotency-Key",
      in: "header",
      required: false,
      description,
      schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x20-\\x7E]+$" }
    }
  ]
  const ok = Predicate.isObject(spec.responses) ? spec.responses["200"] : undefined
  if (Predicate.isObject(ok)) {
    ok.headers = {
      ...(Predicate.isObject(ok.headers) ? ok.headers : {}),
      "Idempotent-Replayed": {
        description: "`true` when this answer is the stored answer to an earlier request with the same Idempotency-Key.",
        schema: { type: "string", enum: ["true"] }
      },
      "Original-Request-Id": {
        description: "On a replay: the X-Request-Id of the request whose answer is replayed.",
        schema: { type: "string" }
      }
    }
  }
  return spec
}
