/**
 * The typed Hookline client, derived from the same HttpApi as the server.
 *
 *   const client = yield* makeHooklineClient({ baseUrl: "http://localhost:8080", apiKey: "hkl_live_…" })
 *   const wallet = yield* client.wallet.get()
 *   const page = yield* client.hooks.search({ query: { q: "money" } })
 *
 * Errors arrive as the classes in Errors.ts (InsufficientCredits, InvalidCursor, ...).
 * Provide an HttpClient, e.g. `FetchHttpClient.layer` from effect/http.
 */
import type { Effect } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { HooklineApi } from "./Api.js"

export interface ClientOptions {
  readonly baseUrl: string
  /** An API key (`hkl_live_…`) for /v1, or the admin token for /admin. */
  readonly apiKey?: string
  /** Sent as Idempotency-Key on every request of this client (one operation's retries). */
  readonly idempotencyKey?: string
}

export const makeHooklineClient = (options: ClientOptions) =>
  HttpApiClient.make(HooklineApi, {
    baseUrl: options.baseUrl,
    transformClient: HttpClient.mapRequest((request) => {
      const withKey = options.apiKey === undefined ? request : HttpClientRequest.bearerToken(request, options.apiKey)
      return options.idempotencyKey === undefined
        ? withKey
        : HttpClientRequest.setHeader(withKey, "idempotency-key", options.idempotencyKey)
    })
  })

export type HooklineClient = Effect.Success<ReturnType<typeof makeHooklineClient>>

export { HooklineApi } from "./Api.js"
export * from "./Errors.js"
