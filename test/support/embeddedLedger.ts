/**
 * The ledger of an embedded data directory, read straight from its PGlite once the server that
 * held it has stopped: every wallet with its balances, the sums of its journal and its pending holds.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { join } from "node:path"

export interface EmbeddedWallet {
  readonly accountId: string
  readonly monthly: number
  readonly topup: number
  readonly journalMonthly: number
  readonly journalTopup: number
  readonly pendingHolds: number
}

export const embeddedLedger = async (dataDir: string): Promise<ReadonlyMap<string, EmbeddedWallet>> => {
  const db = await PGlite.create(join(dataDir, "pgdata"), { extensions: { pg_trgm } })
  try {
    const { rows } = await db.query<{
      account_id: string
      monthly_balance: number
      topup_balance: number
      journal_monthly: number
      journal_topup: number
      pending_holds: number
    }>(`SELECT w.account_id, w.monthly_balance::int, w.topup_balance::int,
               COALESCE((SELECT sum(amount) FROM credit_journal j WHERE j.account_id = w.account_id AND bucket = 'monthly'), 0)::int AS journal_monthly,
               COALESCE((SELECT sum(amount) FROM credit_journal j WHERE j.account_id = w.account_id AND bucket = 'topup'), 0)::int AS journal_topup,
               (SELECT count(*) FROM holds h WHERE h.account_id = w.account_id AND status = 'pending')::int AS pending_holds
          FROM wallets w`)
    return new Map(rows.map((row) => [row.account_id, {
      accountId: row.account_id,
      monthly: row.monthly_balance,
      topup: row.topup_balance,
      journalMonthly: row.journal_monthly,
      journalTopup: row.journal_topup,
      pendingHolds: row.pending_holds
    }]))
  } finally {
    await db.close()
  }
}
