/** What each plan gives (docs/behaviour.md, "Plans and scopes"). */
import type { Plan } from "./Domain.js"

export interface PlanRule {
  readonly apiAccess: boolean
  /** Credits granted each monthly period; null: set per account (arrangements). */
  readonly monthlyGrant: number | null
}

export const planRules: Record<Plan, PlanRule> = {
  free: { apiAccess: false, monthlyGrant: 0 },
  creator: { apiAccess: false, monthlyGrant: 0 },
  pro: { apiAccess: true, monthlyGrant: 1_000 },
  business: { apiAccess: true, monthlyGrant: 10_000 },
  enterprise: { apiAccess: true, monthlyGrant: 100_000 },
  invite: { apiAccess: true, monthlyGrant: null },
  complimentary: { apiAccess: true, monthlyGrant: null },
  custom: { apiAccess: true, monthlyGrant: null }
}

/** Default grant of the per-account arrangements (invite, complimentary, custom). */
export const arrangementDefaultGrant = 1_000

export const hasApiAccess = (plan: Plan): boolean => planRules[plan].apiAccess

/** The grant an account on `plan` gets: the plan's, or the arrangement's own (default 1,000). */
export const grantFor = (plan: Plan, requested: number | undefined): number =>
  planRules[plan].monthlyGrant ?? requested ?? arrangementDefaultGrant
