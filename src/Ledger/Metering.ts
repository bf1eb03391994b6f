/**
 * Metering for the debiting routes: reserve → run → settle what the answer costs, with the
 * X-Credits-* headers; a run that fails, dies or is interrupted (client gone, timeout) refunds
 * its hold instead. Headers are added only after the charge has committed.
 */
import { Effect, Exit, Option } from "effect"
import { CurrentCaller } from "../Auth/Api.js"
import { ChargeOutcomeUnknown, RequestId } from "../Errors.js"
import { addAnswerHeaders } from "../Idempotency/Headers.js"
import { annotateRequestSpan, SpanAttributes } from "../Observability/Tracing.js"
import { isOutcomeUnknown } from "../Sql.js"
import type { Balances, Hold, Operation } from "./Domain.js"
import { Ledger } from "./Ledger.js"

/** The X-Credits-* headers' values (lower-case names). */
export const creditHeaderValues = (charged: number, balances: Balances | null): Record<string, string> => ({
  "x-credits-charged": String(charged),
  ...(balances === null ? {} : { "x-credits-remaining": String(balances.monthly + balances.topup) })
})

/** X-Credits-Charged and X-Credits-Remaining: part of the answer, so an idempotent replay repeats them. */
export const creditHeaders = (charged: number, balances: Balances | null) => addAnswerHeaders(creditHeaderValues(charged, balances))

/** A charge whose connection was lost once sent may have been taken: the answer says its outcome is unknown. */
const unknownWhenLost = <A, E, R>(charge: Effect.Effect<A, E, R>, credits: number) =>
  Effect.catchDefect(charge, (defect) => Effect.die(isOutcomeUnknown(defect) ? new ChargeOutcomeUnknown({ credits, cause: defect }) : defect))

export const metered = <A, E, R>(options: {
  readonly operation: Operation
  readonly reserve: number
  readonly referenceId?: string
  readonly run: (hold: Hold) => Effect.Effect<A, E, R>
  readonly cost: (result: A) => number
}) =>
  Effect.gen(function*() {
    const ledger = yield* Ledger
    const caller = yield* CurrentCaller
    const requestId = yield* RequestId
    return yield* Effect.acquireUseRelease(
      ledger.reserve(caller.accountId, options.reserve, {
        operation: options.operation,
        referenceId: options.referenceId ?? null,
        requestId,
        keyId: caller.keyId
      }),
      (hold) =>
        Effect.gen(function*() {
          const result = yield* options.run(hold)
          const cost = options.cost(result)
          const settled = yield* unknownWhenLost(ledger.settle(hold.id, cost), cost)
          yield* Option.match(settled, {
            // Not pending any more (voided by the sweeper): nothing was taken.
            onNone: () => creditHeaders(0, null),
            onSome: (resolution) => creditHeaders(resolution.charged, resolution.balancesAfter)
          })
          yield* annotateRequestSpan(SpanAttributes.operation, options.operation)
          yield* annotateRequestSpan(SpanAttributes.creditsCharged, Option.getOrElse(Option.map(settled, (r) => r.charged), () => 0))
          return result
        }),
      (hold, exit) => (Exit.isSuccess(exit) ? Effect.void : ledger.refund(hold.id))
    )
  })

/**
 * A fixed price taken at once, for work already done (a single hook): one statement, no hold,
 * with the X-Credits-* headers. Fails with InsufficientCredits when the wallet is short, or
 * SpendLimitReached when the caller's key would pass its limit.
 */
export const chargedAtOnce = (options: { readonly operation: Operation; readonly amount: number; readonly referenceId?: string }) =>
  Effect.gen(function*() {
    const ledger = yield* Ledger
    const caller = yield* CurrentCaller
    const requestId = yield* RequestId
    const balances = yield* unknownWhenLost(ledger.charge(caller.accountId, options.amount, {
      operation: options.operation,
      referenceId: options.referenceId ?? null,
      requestId,
      keyId: caller.keyId
    }), options.amount)
    yield* creditHeaders(options.amount, balances)
    yield* annotateRequestSpan(SpanAttributes.operation, options.operation)
    yield* annotateRequestSpan(SpanAttributes.creditsCharged, options.amount)
  })
