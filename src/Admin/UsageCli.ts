/** The admin CLI's `usage` command (dispatched from Cli.ts): an account's usage summary. */
import { Effect, Schema } from "effect"
import type { HooklineClient } from "../client.js"
import { UsageGroupBy } from "../Ledger/Api.js"
import { existsOnCalendar } from "../Schemas.js"

export const usageHelp = "  usage <account_id> [--from DATE] [--to DATE] [--group-by day|operation]"

export const usageOptions = {
  from: { type: "string" },
  to: { type: "string" },
  "group-by": { type: "string" }
} as const

const date = (name: string, value: string | undefined) => {
  if (value === undefined) return Effect.succeed(undefined)
  const parsed = new Date(value)
  // An ISO date that names no day (2026-02-30) is refused, not rolled over into the next month.
  const impossible = /^\d{4}-\d{2}-\d{2}/.test(value) && !existsOnCalendar(value)
  return Number.isNaN(parsed.getTime()) || impossible ? Effect.die(new Error(`--${name} must be an ISO 8601 date`)) : Effect.succeed(parsed)
}

export const usageCommand = (
  client: HooklineClient,
  accountId: string,
  values: { readonly from?: string; readonly to?: string; readonly "group-by"?: string }
) =>
  Effect.gen(function*() {
    const groupBy = values["group-by"] === undefined
      ? undefined
      : yield* Schema.decodeUnknownEffect(UsageGroupBy)(values["group-by"]).pipe(
        Effect.catch(() => Effect.die(new Error("--group-by must be day or operation")))
      )
    const from = yield* date("from", values.from)
    const to = yield* date("to", values.to)
    return yield* client.admin.accountUsage({
      params: { id: accountId },
      // Absent options are left out of the query.
      query: {
        ...(from === undefined ? {} : { from }),
        ...(to === undefined ? {} : { to }),
        ...(groupBy === undefined ? {} : { group_by: groupBy })
      }
    })
  })
