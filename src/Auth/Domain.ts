/**
 * The access domain: what a key may do (scopes) and what an account has bought (plans). Services
 * use these; the wire contract (Api.ts files) reuses the same literals.
 */
import { Schema } from "effect"

export const Scope = Schema.Literals(["hooks:read", "predict:write", "webhooks:write"])
export type Scope = typeof Scope.Type
export const allScopes: ReadonlyArray<Scope> = Scope.literals

export const Plan = Schema.Literals(["free", "creator", "pro", "business", "enterprise", "invite", "complimentary", "custom"])
export type Plan = typeof Plan.Type
