/** The Ledger's domain types, shared by its services and the contracts that show them. */
import { Schema } from "effect"

/** A wallet's two balances: `monthly` (granted each period, expires at rollover) and `topup` (bought, kept). */
export const Bucket = Schema.Literals(["monthly", "topup"])
export type Bucket = typeof Bucket.Type

/** What a hold is for; the credit history names it. */
export const Operation = Schema.Literals(["search", "list", "hook", "prediction"])
export type Operation = typeof Operation.Type

/**
 * The most credits one balance may hold: the largest integer every JSON client reads exactly
 * (2^53 - 1), well inside the database's bigint. A grant that would pass it is refused (422).
 */
export const maxBalance = Number.MAX_SAFE_INTEGER

export interface Balances {
  readonly monthly: number
  readonly topup: number
}

/** A wallet as the Ledger sees it: both balances and the end of the monthly period (null: no grant). */
export interface WalletState extends Balances {
  readonly periodEnd: Date | null
}

/** A pending reservation: `amount` credits taken from the wallet until settled or refunded. */
export interface Hold {
  readonly id: string
  readonly accountId: string
  readonly amount: number
  readonly balancesAfter: Balances
}

export interface Resolution {
  /** Credits this hold finally took (0 for a refund). */
  readonly charged: number
  readonly balancesAfter: Balances
}

export interface ReserveOptions {
  readonly operation: Operation
  readonly referenceId?: string | null
  readonly requestId?: string | null
  /** The API key the debit counts against (its spend limit); none: no key's budget. */
  readonly keyId?: string | null
  /** false: the hold has no timeout (a prediction's hold is resolved by its job's lifecycle). */
  readonly expires?: boolean
}

export interface GrantDetails {
  /** Top-up only: when what is left of the grant expires; none: never. */
  readonly expiresAt?: Date | null
  readonly reason?: string | null
  readonly referenceId?: string | null
  readonly requestId?: string | null
}

/** A live top-up grant: what it granted, what is left, and when that expires (null: never). */
export interface TopupGrant {
  readonly id: string
  readonly amount: number
  readonly remaining: number
  readonly expiresAt: Date | null
  readonly createdAt: Date
}
