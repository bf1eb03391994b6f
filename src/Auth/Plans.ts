/** What each plan gives (docs/behaviour.md, "Plans and scopes"). */
import type { RateTier } from "../RateLimit/RateLimits.js"
import type { Plan } from "./Domain.js"

export interface PlanRule {
  readonly apiAccess: boolean
  /** The request-rate tier its keys are limited by. */
  readonly rateTier: RateTier
  /** Credits granted each monthly period; null: set per account (arrangements). */
  readonly monthlyGrant: number | null
}

export const planRules: Record<Plan, PlanRule> = {
  free: { apiAccess: false, rateTier: "pro", monthlyGrant: 0 },
  creator: { apiAccess: false, rateTier: "pro", monthlyGrant: 0 },
  pro: { apiAccess: true, rateTier: "pro", monthlyGrant: 1_000 },
  business: { apiAccess: true, rateTier: "business", monthlyGrant: 10_000 },
  enterprise: { apiAccess: true, rateTier: "enterprise", monthlyGrant: 100_000 },
  invite: { apiAccess: true, rateTier: "business", monthlyGrant: null },
  complimentary: { apiAccess: true, rateTier: "business", monthlyGrant: null },
  custom: { apiAccess: true, rateTier: "business", monthlyGrant: null }
}

/** Default grant of the per-account arrangements (invite, complimentary, custom). */
export const arrangementDefaultGrant = 1_000

export const hasApiAccess = (plan: Plan): boolean => planRules[plan].apiAccess

export const rateTierOf = (plan: Plan): RateTier => planRules[plan].rateTier

/** The grant an account on `plan` gets: the plan's, or the arrangement's own (default 1,000). */
export const grantFor = (plan: Plan, requested: number | undefined): number =>
  planRules[plan].monthlyGrant ?? requested ?? arrangementDefaultGrant
