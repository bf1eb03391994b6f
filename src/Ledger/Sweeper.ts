/**
 * The ledger's background fibers: one voids holds left pending by crashed requests and rolls over
 * monthly periods that ended while nobody called (every LEDGER_SWEEP_INTERVAL); the other expires
 * top-up grants that are due (every GRANT_EXPIRY_INTERVAL). Every statement is safe to run from
 * several processes at once (row locks, `status = 'pending'` and `expired_at IS NULL` guards).
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
    const expiry = ledger.expireDueGrants.pipe(Effect.catchCause(logBackgroundFailure("top-up grant expiry failed")))
    yield* sweep.pipe(Effect.repeat(Schedule.spaced(ledger.config.sweepInterval)), Effect.forkScoped)
    yield* expiry.pipe(Effect.repeat(Schedule.spaced(ledger.config.grantExpiryInterval)), Effect.forkScoped)
  })
)
