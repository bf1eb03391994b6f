/**
 * The Idempotency-Key contract. An endpoint that honours it says so itself:
 *
 *   HttpApiEndpoint.post(...).middleware(IdempotencyKeys).annotate(OpenApi.Transform, acceptsIdempotencyKey)
 *
 * The middleware puts its 409 idempotency_in_progress on the endpoint (in /openapi.json and the
 * typed client) and gives the handler what `idempotent(...)` (Http.ts) needs of the endpoint, so
 * a handler can only call it on an endpoint marked so; the transform documents the headers. The
 * header is read and checked by `idempotent(...)`, after authentication and payload validation.
 */
import { Context, Predicate, type Schema } from "effect"
import { HttpApiMiddleware } from "effect/http-api"
import { IdempotencyInProgressWire } from "../Errors.js"

/**
 * How an idempotent endpoint answers success, which its stored answer repeats byte for byte: its
 * success schema as JSON with status 200 (what the framework answers for a success schema without
 * a status or encoding of its own; test/idempotency-openapi.test.ts holds every such endpoint to it).
 */
export class IdempotentEndpoint extends Context.Service<IdempotentEndpoint, {
  readonly success: Schema.Codec<unknown, unknown>
  readonly status: number
  readonly contentType: string
}>()("hookline/IdempotentEndpoint") {}

/** Marks an endpoint that honours Idempotency-Key (its implementation: Http.ts, IdempotencyKeysLive). */
export class IdempotencyKeys extends HttpApiMiddleware.Service<IdempotencyKeys, { provides: IdempotentEndpoint }>()(
  "hookline/IdempotencyKeys",
  { error: IdempotencyInProgressWire }
) {}

/** 1 to 255 printable ASCII characters (space to tilde). */
export const idempotencyKeyPattern = /^[\x20-\x7E]{1,255}$/

export const idempotencyKeyRule = "must be 1 to 255 printable ASCII characters"

const description =
  "Makes a retry safe (Stripe semantics). The first successful answer to a key is kept 24 hours with a " +
  "fingerprint of method, path and body; a repeat replays its status, body and X-Credits-* headers with " +
  "`Idempotent-Replayed: true` and has no second effect. A concurrent repeat waits for the first and replays it. " +
  "The same key with another method, path or body is 422 validation_error. Error answers are not kept (they " +
  "changed nothing), so a retry after one runs again; except a 503 saying the outcome is unknown (the connection was " +
  "lost at COMMIT and the database cannot tell yet whether it committed): the key stays held, a retry is 409 " +
  "idempotency_in_progress until the outcome is known, then replays the answer if it committed, or runs once if it did not; " +
  "never twice. Keys are scoped to the API key (to the admin token on /admin): another key of the same account never replays this key's answers."

/**
 * OpenApi.Transform for an endpoint: documents the request header, the replay headers and the 409.
 * The operation object is mutated in place (its `parameters`, its 200 response's headers, its 409's description).
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
  const conflict = Predicate.isObject(spec.responses) ? spec.responses["409"] : undefined
  if (Predicate.isObject(conflict)) {
    conflict.description = "idempotency_in_progress: the first request with this Idempotency-Key is still committing, or its outcome is unknown."
  }
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
