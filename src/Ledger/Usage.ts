/**
 * The usage summary: the credit journal aggregated over a bounded range, per UTC day or per
 * operation, in one statement (HistoryRepo's `usageRows`). The journal's covering index (account_id, created_at) INCLUDE
 * (entry_type, operation, amount) makes it an index-only range scan of that account's rows in
 * the range, whatever the journal's size.
 *
 * Every journal row lands in exactly one column, so `net` (granted - spent + refunded - expired)
 * is the sum of the journal's amounts over the range:
 * - spent: reserves, less the unused credits a request's hold gave back (releases of search,
 *   list and get holds);
 * - refunded: a failed prediction's credits given back (releases of prediction holds);
 * - granted: grants; expired: expiries.
 */
import { Config, Context, Duration, Effect, Layer, Schema } from "effect"
import { ValidationFailed } from "../Errors.js"
import { traced } from "../Observability/Tracing.js"
import { currentDate } from "../Repository.js"
import { toTimestamp } from "../Schemas.js"
import type { UsageParams, UsageRow, UsageSummary } from "./Api.js"
import { HistoryRepo } from "./HistoryRepo.js"
import { Ledger } from "./Ledger.js"

export const UsageConfig = Config.all({
  maxRangeDays: Config.schema(
    Schema.Int.check(Schema.isGreaterThanOrEqualTo(1, { message: "USAGE_MAX_RANGE_DAYS must be at least 1" })),
    "USAGE_MAX_RANGE_DAYS"
  ).pipe(Config.withDefault(93))
})

const defaultRange = Duration.days(30)

/** An account's usage summary. */
export interface UsageService {
  /**
   * The summary of [from, to) (default: the last 30 days to now), grouped by day, key or
   * operation; a monthly rollover that is due is applied first, so it is counted.
   * ValidationFailed when from is not before to or the range is over USAGE_MAX_RANGE_DAYS.
   */
  readonly summarise: (accountId: string, params: UsageParams) => Effect.Effect<UsageSummary, ValidationFailed>
}

const make = Effect.gen(function*() {
  const repo = yield* HistoryRepo
  const ledger = yield* Ledger
  const config = yield* UsageConfig

  const summarise = (accountId: string, params: UsageParams) =>
    Effect.gen(function*() {
      yield* ledger.wallet(accountId)
      const to = params.to ?? (yield* currentDate)
      const from = params.from ?? new Date(to.getTime() - Duration.toMillis(defaultRange))
      const groupBy = params.group_by ?? "day"
      if (from.getTime() >= to.getTime()) {
        return yield* new ValidationFailed({ message: "from: must be before to." })
      }
      if (to.getTime() - from.getTime() > Duration.toMillis(Duration.days(config.maxRangeDays))) {
        return yield* new ValidationFailed({ message: `to: the range is at most ${config.maxRangeDays} days.` })
      }
      const rows = yield* repo.usageRows(accountId, from, to, groupBy)
      const data: Array<UsageRow> = rows.map((row) => ({ ...row }))
      const sum = (pick: (row: UsageRow) => number) => data.reduce((total, row) => total + pick(row), 0)
      return {
        object: "usage_summary",
        from: toTimestamp(from),
        to: toTimestamp(to),
        group_by: groupBy,
        data,
        totals: {
          spent: sum((row) => row.spent),
          refunded: sum((row) => row.refunded),
          granted: sum((row) => row.granted),
          expired: sum((row) => row.expired),
          net: sum((row) => row.net)
        }
      } satisfies UsageSummary
    }).pipe(traced("Usage.summarise", { attributes: { accountId } }))

  return Usage.of({ summarise })
})

export class Usage extends Context.Service<Usage, UsageService>()("hookline/Usage") {
  /** Takes its HistoryRepo and Ledger from the caller (in-memory ones in a test). */
  static readonly layerWithoutDependencies = Layer.effect(Usage, make)
  static readonly layer = Usage.layerWithoutDependencies.pipe(Layer.provide([HistoryRepo.layer, Ledger.layer]))
}
