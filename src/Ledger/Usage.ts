/**
 * The usage summary: the credit journal aggregated over a bounded range, per UTC day or per
 * operation, in one statement. The journal's covering index (account_id, created_at) INCLUDE
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
import { SqlClient } from "effect/sql"
import { ValidationFailed } from "../Errors.js"
import { traced } from "../Observability/Tracing.js"
import { currentDate } from "../Repository.js"
import { orDieOnDb } from "../Sql.js"
import { toTimestamp } from "../Schemas.js"
import type { UsageGroupBy, UsageParams, UsageRow, UsageSummary } from "./Api.js"

export const UsageConfig = Config.all({
  maxRangeDays: Config.schema(
    Schema.Int.check(Schema.isGreaterThanOrEqualTo(1, { message: "USAGE_MAX_RANGE_DAYS must be at least 1" })),
    "USAGE_MAX_RANGE_DAYS"
  ).pipe(Config.withDefault(93))
})

const defaultRange = Duration.days(30)

const Row = Schema.Struct({
  key: Schema.String,
  spent: Schema.Number,
  refunded: Schema.Number,
  granted: Schema.Number,
  expired: Schema.Number,
  net: Schema.Number
})

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const config = yield* UsageConfig
  const decodeRows = Schema.decodeUnknownEffect(Schema.Array(Row))

  /** The one query behind a summary (bench/usage.ts explains it as it is). */
  const statement = (accountId: string, from: Date, to: Date, groupBy: UsageGroupBy) => {
    // Grouped by the expression migration 0007 keeps statistics on (so the groups are hashed).
    const group = groupBy === "day"
      ? sql`(created_at AT TIME ZONE 'UTC')::date`
      : sql`CASE operation WHEN 'hook' THEN 'get' WHEN 'prediction' THEN 'predict' ELSE COALESCE(operation, 'other') END`
    return sql`
      SELECT ${groupBy === "day" ? sql`to_char(${group}, 'YYYY-MM-DD')` : group} AS key,
             COALESCE(-sum(amount) FILTER (WHERE entry_type = 'reserve'
               OR (entry_type = 'release' AND operation IS DISTINCT FROM 'prediction')), 0) AS spent,
             COALESCE(sum(amount) FILTER (WHERE entry_type = 'release' AND operation = 'prediction'), 0) AS refunded,
             COALESCE(sum(amount) FILTER (WHERE entry_type = 'grant'), 0) AS granted,
             COALESCE(-sum(amount) FILTER (WHERE entry_type = 'expire'), 0) AS expired,
             sum(amount) AS net
        FROM credit_journal
       WHERE account_id = ${accountId} AND created_at >= ${from} AND created_at < ${to}
       GROUP BY ${group}
       ORDER BY 1`
  }

  const summarise = (accountId: string, params: UsageParams) =>
    Effect.gen(function*() {
      const to = params.to ?? (yield* currentDate)
      const from = params.from ?? new Date(to.getTime() - Duration.toMillis(defaultRange))
      const groupBy = params.group_by ?? "day"
      if (from.getTime() >= to.getTime()) {
        return yield* new ValidationFailed({ message: "from: must be before to." })
      }
      if (to.getTime() - from.getTime() > Duration.toMillis(Duration.days(config.maxRangeDays))) {
        return yield* new ValidationFailed({ message: `to: the range is at most ${config.maxRangeDays} days.` })
      }
      const rows = yield* statement(accountId, from, to, groupBy).pipe(
        Effect.flatMap(decodeRows),
        orDieOnDb
      )
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

  return { summarise, statement } as const
})

export class Usage extends Context.Service<Usage, Effect.Success<typeof make>>()("hookline/Usage") {
  static readonly layer = Layer.effect(Usage, make)
}
