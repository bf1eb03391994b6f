/** How a prediction job ends, and what retry start answers. */
import type { Balances } from "../Ledger/Ledger.js"
import type { Prediction, PredictionErrorType } from "./Api.js"
import type { ClipScore } from "./Scorer.js"

/** How a job ends. */
export type Outcome =
  | { readonly status: "succeeded"; readonly score: ClipScore }
  | {
    readonly status: "failed"
    readonly type: PredictionErrorType
    readonly message: string
    readonly durationSec: number | null
  }

/** A failure found before any analysis (nothing measured). */
export const failedWith = (type: PredictionErrorType, message: string): Outcome => ({
  status: "failed",
  type,
  message,
  durationSec: null
})

export interface RetryOutcome {
  readonly prediction: Prediction
  /** Credits this call reserved (20 or 0). */
  readonly charged: number
  readonly balances: Balances
}
