/**
 * HistoryRepo in memory: the credit history and the usage summary read from an in-memory ledger
 * (makeLedgerRepoInMemory, src/Ledger/RepoMemory.ts), by the same rules as the PostgreSQL
 * statements. For tests of CreditHistory and Usage that need no database; the PostgreSQL
 * repository remains the proof of the SQL.
 *
 * The memory ledger's journal rows carry no seq, id, time or request id, and its holds no
 * settlement, so they arrive through `ledgerLayer`: the memory LedgerRepo that stamps each row
 * its statement wrote (seq, id, Clock time, the request's id) and each settled charge its place
 * in the history, as the database does. Provide it instead of the memory ledger's own layer; a
 * journal row written past it is a defect when read.
 *
 * What differs: `usageStatement` is the PostgreSQL statement compiled for EXPLAIN, which fails
 * if run: there is no database here.
 */
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Layer, Option, Schema } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient, SqlError } from "effect/sql"
import { newId } from "../Ids.js"
import type { UsageGroupBy } from "./Api.js"
import { HistoryRepo, HistoryRow, type Position, UsageRow, usageStatement } from "./HistoryRepo.js"
import { LedgerRepo } from "./Repo.js"
import { makeLedgerRepoInMemory, type MemoryJournalRow, type MemoryLedgerState } from "./RepoMemory.js"

/** What the database adds to a journal row as it is written. */
export interface JournalStamp {
  readonly seq: number
  readonly id: string
  readonly createdAt: number // epoch milliseconds
  readonly requestId: string | null
  readonly referenceId: string | null
}

/** What a hold remembers of the request that opened it. */
export interface HoldRequest {
  readonly requestId: string | null
  readonly referenceId: string | null
}

/** A settled request charge's place in the history (`holds.history_seq` and the settled amounts). */
export interface SettledCharge {
  readonly historySeq: number
  readonly settledMonthly: number
  readonly settledTopup: number
  readonly resolvedAt: number // epoch milliseconds
}

export interface MemoryHistoryState {
  readonly ledger: MemoryLedgerState
  /** By journal row: the memory ledger's rows are the keys. */
  stamps: Map<MemoryJournalRow, JournalStamp>
  /** Both by hold id. */
  holdRequests: Map<string, HoldRequest>
  settledCharges: Map<string, SettledCharge>
  /** The journal's sequence: like PostgreSQL's, a failed transaction does not give its values back. */
  lastSeq: number
}

type Repo = HistoryRepo["Service"]
type Filters = Parameters<Repo["historyPage"]>[1]

// Decoded like the SQL rows, so a value the schema refuses is a defect here too.
const decodeHistory = (rows: ReadonlyArray<unknown>) => Effect.orDie(Schema.decodeUnknownEffect(Schema.Array(HistoryRow))(rows))
const decodeUsage = (rows: ReadonlyArray<unknown>) => Effect.orDie(Schema.decodeUnknownEffect(Schema.Array(UsageRow))(rows))

/** A SqlClient with PostgreSQL's compiler and no connection: it builds statements, and running one fails. */
const offlineSql = SqlClient.make({
  acquirer: Effect.fail(
    new SqlError.SqlError({
      reason: new SqlError.ConnectionError({ cause: null, message: "the in-memory HistoryRepo has no database", operation: "connect" })
    })
  ),
  compiler: PgClient.makeCompiler(),
  driver: "memory",
  spanAttributes: []
}).pipe(Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make))

/** The memory LedgerRepo `inner`, stamping what each statement writes as the database would. */
const recordingLedger = (inner: LedgerRepo["Service"], state: MemoryHistoryState): LedgerRepo["Service"] => {
  /** Stamps the journal rows written since the last stamp (they are at the journal's end). */
  const stampNewRows = (now: number, requestId: string | null) => {
    const journal = state.ledger.journal
    let first = journal.length
    while (first > 0 && !state.stamps.has(journal[first - 1])) first--
    for (const row of journal.slice(first)) {
      // A hold's rows carry the request that opened it (the SQL copies it from the hold row).
      const hold = row.holdId === null ? undefined : state.holdRequests.get(row.holdId)
      state.stamps.set(row, {
        seq: ++state.lastSeq,
        id: newId("txn"),
        createdAt: now,
        requestId: hold === undefined ? requestId : hold.requestId,
        referenceId: hold === undefined ? row.referenceId : hold.referenceId
      })
    }
  }

  /** Runs `statement`, then `settled` (a settle's own record), then stamps the rows it wrote. */
  const recorded = <A>(statement: Effect.Effect<A>, requestId: string | null, settled: (now: number, result: A) => void = () => {}) =>
    Effect.flatMap(statement, (result) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        settled(now, result)
        stampNewRows(now, requestId)
        return result
      }))

  return {
    ...inner,
    rollOver: (accountId) => recorded(inner.rollOver(accountId), null),
    startNewPeriod: (input) => recorded(inner.startNewPeriod(input), null),
    reserveHold: (input) =>
      Effect.suspend(() => {
        state.holdRequests.set(input.holdId, { requestId: input.requestId, referenceId: input.referenceId })
        return recorded(inner.reserveHold(input), input.requestId)
      }),
    chargeAtOnce: (input) => recorded(inner.chargeAtOnce(input), input.requestId),
    settleHold: (input) =>
      recorded(inner.settleHold(input), null, (now, result) => {
        const hold = state.ledger.holds.get(input.holdId)
        // Only a request's charge that took something is listed; its place is drawn before its release rows'.
        if (Option.isNone(result) || hold === undefined || input.charge <= 0 || hold.operation === "prediction") return
        const settledMonthly = Math.min(hold.monthlyAmount, input.charge)
        state.settledCharges.set(hold.id, {
          historySeq: ++state.lastSeq,
          settledMonthly,
          settledTopup: input.charge - settledMonthly,
          resolvedAt: now
        })
      }),
    refundHold: (holdId) => recorded(inner.refundHold(holdId), null),
    voidHold: (holdId) => recorded(inner.voidHold(holdId), null),
    grant: (input) => recorded(inner.grant(input), input.requestId),
    expireGrants: (accountId) => recorded(inner.expireGrants(accountId), null)
  }
}

const historyType = (entryType: MemoryJournalRow["entryType"]) =>
  entryType === "grant" ? "grant" : entryType === "expire" ? "expiry" : entryType === "reserve" ? "charge" : "refund"

/** A journal row's stamp (seq, id, time, request); a row written past `ledgerLayer` has none. */
const stampIn = (state: MemoryHistoryState) => (row: MemoryJournalRow) => {
  const stamp = state.stamps.get(row)
  if (stamp === undefined) {
    throw new Error("a journal row was written past the HistoryRepo memory's ledgerLayer: provide that layer as the LedgerRepo")
  }
  return stamp
}

const within = (filters: Filters, type: string, createdAt: number) =>
  (filters.type === undefined || filters.type === type) &&
  (filters["created[gte]"] === undefined || createdAt >= filters["created[gte]"].getTime()) &&
  (filters["created[lte]"] === undefined || createdAt <= filters["created[lte]"].getTime())

/** The rows the history lists as the journal has them: no hold, a prediction's, or an expiry. */
const journalRows = (state: MemoryHistoryState, accountId: string, filters: Filters) => {
  const stampOf = stampIn(state)
  return state.ledger.journal
    .filter((row) => row.accountId === accountId && (row.holdId === null || row.operation === "prediction" || row.entryType === "expire"))
    .map((row) => ({ row, stamp: stampOf(row), type: historyType(row.entryType) }))
    .filter(({ stamp, type }) => within(filters, type, stamp.createdAt))
    .map(({ row, stamp, type }) => ({
      pos: stamp.seq,
      ord: 0,
      id: stamp.id,
      type,
      bucket: row.bucket,
      amount: row.amount,
      monthly_after: row.monthlyAfter,
      topup_after: row.topupAfter,
      created_at: new Date(stamp.createdAt),
      request_id: stamp.requestId,
      kind: row.operation,
      reference_id: stamp.referenceId,
      reason: row.reason
    }))
}

/** One row per bucket a settled request charge took from, at its settle, with its last journal row's balances. */
const chargeRows = (state: MemoryHistoryState, accountId: string, filters: Filters) => {
  const stampOf = stampIn(state)
  return [...state.ledger.holds.values()]
    .filter((hold) => hold.accountId === accountId && hold.status === "settled")
    .flatMap((hold) => {
      const charge = state.settledCharges.get(hold.id)
      if (charge === undefined || !within(filters, "charge", charge.resolvedAt)) return []
      const rows = state.ledger.journal.filter((row) => row.holdId === hold.id)
      const last = rows.reduce<MemoryJournalRow | undefined>(
        (latest, row) => latest === undefined || stampOf(row).seq > stampOf(latest).seq ? row : latest,
        undefined
      )
      const request = state.holdRequests.get(hold.id)
      const parts = [
        { ord: 1, bucket: "monthly", amount: charge.settledMonthly },
        { ord: 2, bucket: "topup", amount: charge.settledTopup }
      ] as const
      return parts.flatMap((part) => {
        const reserved = rows.find((row) => row.entryType === "reserve" && row.bucket === part.bucket)
        if (part.amount <= 0 || reserved === undefined || last === undefined) return []
        return [{
          pos: charge.historySeq,
          ord: part.ord,
          id: stampOf(reserved).id,
          type: "charge",
          bucket: part.bucket,
          amount: 0 - part.amount,
          monthly_after: last.monthlyAfter,
          topup_after: last.topupAfter,
          created_at: new Date(charge.resolvedAt),
          request_id: request?.requestId ?? null,
          kind: hold.operation,
          reference_id: request?.referenceId ?? null,
          reason: null
        }]
      })
    })
}

/** The statements, read from `state`. */
const readStatements = (state: MemoryHistoryState) => {
  const stampOf = stampIn(state)

  /** Strictly after `after` in (pos, ord) descending order. */
  const beyond = (after: Option.Option<Position>) => (row: { readonly pos: number; readonly ord: number }) =>
    Option.match(after, {
      onNone: () => true,
      onSome: (position) => row.pos < position.seq || (row.pos === position.seq && row.ord < position.ord)
    })

  const historyPage = (accountId: string, filters: Filters, after: Option.Option<Position>, limit: number) =>
    Effect.flatMap(
      Effect.sync(() =>
        [...journalRows(state, accountId, filters), ...chargeRows(state, accountId, filters)]
          .filter(beyond(after))
          .sort((a, b) => b.pos - a.pos || b.ord - a.ord)
          .slice(0, limit + 1)
      ),
      decodeHistory
    )

  /** `CASE operation WHEN 'hook' THEN 'get' WHEN 'prediction' THEN 'predict' ELSE COALESCE(operation, 'other') END` */
  const operationKey = (operation: string) => operation === "hook" ? "get" : operation === "prediction" ? "predict" : operation

  const usageRows = (accountId: string, from: Date, to: Date, groupBy: UsageGroupBy) =>
    Effect.flatMap(
      Effect.sync(() => {
        const groups = new Map<string, { spent: number; refunded: number; granted: number; expired: number; net: number }>()
        for (const row of state.ledger.journal) {
          if (row.accountId !== accountId) continue
          const createdAt = stampOf(row).createdAt
          if (createdAt < from.getTime() || createdAt >= to.getTime()) continue
          const key = groupBy === "day" ? new Date(createdAt).toISOString().slice(0, 10) : groupBy === "key" ? row.keyId ?? "none" : operationKey(row.operation)
          const group = groups.get(key) ?? { spent: 0, refunded: 0, granted: 0, expired: 0, net: 0 }
          groups.set(key, group)
          const predictionRelease = row.entryType === "release" && row.operation === "prediction"
          if (row.entryType === "reserve" || (row.entryType === "release" && !predictionRelease)) group.spent -= row.amount
          if (predictionRelease) group.refunded += row.amount
          if (row.entryType === "grant") group.granted += row.amount
          if (row.entryType === "expire") group.expired -= row.amount
          group.net += row.amount
        }
        // `ORDER BY 1`: the keys (dates, operation names) sort the same in every collation.
        return [...groups].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0).map(([key, sums]) => ({ key, ...sums }))
      }),
      decodeUsage
    )

  return { historyPage, usageRows }
}

/**
 * A fresh in-memory history over `ledger` (a new memory ledger by default): `layer` (the
 * HistoryRepo), `ledgerLayer` (the LedgerRepo that feeds it; provide it instead of
 * `ledger.layer`), and the state for a test to read.
 */
export const makeHistoryRepoInMemory = (ledger: ReturnType<typeof makeLedgerRepoInMemory> = makeLedgerRepoInMemory()) => {
  const state: MemoryHistoryState = {
    ledger: ledger.state,
    stamps: new Map(),
    holdRequests: new Map(),
    settledCharges: new Map(),
    lastSeq: 0
  }
  const statements = readStatements(state)
  const layer = Layer.effect(
    HistoryRepo,
    Effect.map(offlineSql, (sql) => {
      const repo: Repo = {
        historyPage: statements.historyPage,
        usageRows: statements.usageRows,
        usageStatement: (accountId, from, to, groupBy) => usageStatement(sql, accountId, from, to, groupBy)
      }
      return repo
    })
  )
  const ledgerLayer = Layer.effect(LedgerRepo, Effect.map(LedgerRepo, (inner) => recordingLedger(inner, state))).pipe(
    Layer.provide(ledger.layer)
  )
  return { layer, ledgerLayer, state }
}
