/** The Ledger's domain types, shared by its services and the contracts that show them. */
import { Schema } from "effect"

/** A wallet's two balances: `monthly` (granted each period, expires at rollover) and `topup` (bought, kept). */
export const Bucket = Schema.Literal("monthly", "topup")
export type Bucket = typeof Bucket.Type
