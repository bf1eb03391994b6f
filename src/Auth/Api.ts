/** The access contract: who is calling, which rule a route follows, and the bearer middleware. */
import { Context } from "effect"
import { HttpApiMiddleware, HttpApiSecurity } from "effect/http-api"
import { AccountSuspendedWire, ApiNotEnabledWire, InvalidApiKeyWire, RateLimitExceededWire } from "../Errors.js"
import type { Scope } from "./Domain.js"

export { allScopes, Plan, Scope } from "./Domain.js"

/** The account and key behind the request, provided by the middleware. */
export interface Caller {
  readonly accountId: string
  readonly keyId: string
  readonly plan: string
}
export class CurrentCaller extends Context.Service<CurrentCaller, Caller>()("hookline/CurrentCaller") {}

/**
 * The access rule of one endpoint, declared beside it in its Api.ts: the key scope it needs
 * (null: any valid key) and whether it stays open when the plan has no API access.
 */
export interface AccessRuleValue {
  readonly scope: Scope | null
  readonly openWithoutApiAccess: boolean
}
export class AccessRule extends Context.Service<AccessRule, AccessRuleValue>()("hookline/AccessRule") {}
export const needs = (scope: Scope | null, openWithoutApiAccess = false): AccessRuleValue => ({
  scope,
  openWithoutApiAccess
})

export class Authentication extends HttpApiMiddleware.Service<Authentication, { provides: CurrentCaller }>()(
  "hookline/Authentication",
  {
    error: [InvalidApiKeyWire, AccountSuspendedWire, ApiNotEnabledWire, RateLimitExceededWire],
    security: { bearer: HttpApiSecurity.bearer }
  }
) {}
