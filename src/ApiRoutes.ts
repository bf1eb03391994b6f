/**
 * The one walk over the API's declared endpoints. The access rules and the route templates of
 * metrics and logs are tables built from it, keyed as the router matches a request (`routeKey`:
 * "GET /v1/hooks/:id").
 */
import { Option } from "effect"
import type { HttpApiEndpoint } from "effect/http-api"
import { HooklineApi } from "./Api.js"

export type DeclaredEndpoint = HttpApiEndpoint.Top

/** Every endpoint of every group, in declaration order. */
export const declaredEndpoints: ReadonlyArray<DeclaredEndpoint> = Object.values(HooklineApi.groups).flatMap(
  (group) => Object.values(group.endpoints) as ReadonlyArray<DeclaredEndpoint>
)

/** The key of a route: its method and path template. */
export const routeKey = (method: string, path: string): string => `${method} ${path}`

/** What `pick` finds for each endpoint, by route key; endpoints it finds nothing for are left out. */
export const routeTable = <A>(pick: (endpoint: DeclaredEndpoint) => Option.Option<A>): ReadonlyMap<string, A> =>
  new Map(declaredEndpoints.flatMap((endpoint) =>
    Option.match(pick(endpoint), {
      onNone: () => [],
      onSome: (value) => [[routeKey(endpoint.method, endpoint.path), value] as const]
    })
  ))
