/**
 * The ledger's background fiber: voids holds left pending by crashed requests and rolls over
 * monthly periods that ended while nobody called. Every statement is safe to run from several
 * processes at once (row locks, `status = 'pending'` guards).
 */
import { Effect, Layer, Schedule } from "effect"
import { logBackgroundFailure } from "../Sql.js"
import { Ledger } from "./Ledger.js"

export const LedgerSweeperLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const ledger = yield* Ledger
    const sweep = Effect.all([ledger.voidExpiredHolds, ledger.rollover(null)]).pipe(
      Effect.catchCause(logBackgroundFailure("ledger sweep failed")),
      Effect.withSpan("Ledger.sweep")
    )
    yield* sweep.pipe(Effect.repeat(Schedule.spaced(ledger.config.sweepInterval)), Effect.forkScoped)
  })
)
