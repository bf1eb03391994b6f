/**
 * The three longest money statements, built for LedgerRepo (which decodes their rows): the
 * monthly rollover, the debit (a hold's reserve or a charge taken at once) and a hold's resolution.
 */
import type { SqlClient, Statement } from "effect/sql"
import { newId } from "../Ids.js"
import { commitWithoutFlush } from "../Sql.js"

/**
 * The time a statement runs at, as a parameter: the Ledger's statements never read the database's
 * now(), so Effect's Clock (a TestClock in tests) decides periods, expiries and journal times.
 */
export const timeParameter = (sql: SqlClient.SqlClient, now: Date) => sql`${now}::timestamptz`

/**
 * Starts a new monthly period for every wallet whose period has ended (or only `accountId`'s):
 * unused monthly credits expire, the balance is reset to the account's grant, and the period end
 * moves to the first anchor + n months after now. Idempotent and safe to race: the wallet row
 * lock serialises concurrent rollovers, and the second finds nothing due. Answers `rolled`.
 */
export const rolloverStatement = (sql: SqlClient.SqlClient, accountId: string | null, now: Date) => {
  const at = timeParameter(sql, now)
  return sql`
    WITH due AS (
      SELECT w.account_id, w.monthly_balance AS m, w.topup_balance AS t, a.monthly_grant AS g,
             (SELECT w.period_anchor + make_interval(months => k)
                FROM generate_series(1, 12000) k
               WHERE w.period_anchor + make_interval(months => k) > ${at}
               ORDER BY k LIMIT 1) AS next_end
        FROM wallets w JOIN accounts a ON a.id = w.account_id
       WHERE w.monthly_period_end IS NOT NULL AND w.monthly_period_end <= ${at}
         ${accountId === null ? sql`` : sql`AND w.account_id = ${accountId}`}
       ORDER BY w.account_id
       FOR UPDATE OF w
    ),
    upd AS (
      UPDATE wallets w SET monthly_balance = d.g, monthly_period_end = d.next_end
        FROM due d WHERE w.account_id = d.account_id
      RETURNING w.account_id
    ),
    journal AS (
      INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reason, created_at)
      SELECT 'txn_' || replace(gen_random_uuid()::text, '-', ''), account_id, 'expire', 'monthly', -m, 0, t, 'rollover', 'monthly period ended', ${at}
        FROM due WHERE m > 0
      UNION ALL
      SELECT 'txn_' || replace(gen_random_uuid()::text, '-', ''), account_id, 'grant', 'monthly', g, g, t, 'rollover', 'monthly grant', ${at}
        FROM due WHERE g > 0
      RETURNING 1
    )
    SELECT count(*)::int AS rolled FROM upd`
}

export interface DebitInput {
  readonly accountId: string
  readonly amount: number
  readonly operation: string
  readonly referenceId: string | null
  readonly requestId: string | null
  /** The API key the debit counts against (its spend limit); null: none (an admin's debit). */
  readonly keyId: string | null
}

/**
 * The key's budget, locked after the wallet (the join needs the wallet's row first): its limit,
 * what it spent in the current period (0 when its count is from an earlier period) and that
 * period's end. NO KEY UPDATE: foreign-key checks on the key (a new prediction) do not wait on it.
 */
const keyBudgetCte = (sql: SqlClient.SqlClient, keyId: string | null, at: Statement.Fragment) =>
  keyId === null
    ? sql`budget AS (SELECT NULL::bigint AS lim, 0::bigint AS spent, NULL::timestamptz AS kpe WHERE false)`
    : sql`budget AS (
        SELECT k.spend_limit AS lim, CASE WHEN k.spend_period_end = b.kpe THEN k.period_spent ELSE 0 END AS spent, b.kpe
          FROM api_keys k JOIN (SELECT hookline_key_period_end(pe, ${at}) AS kpe FROM old) b ON true
         WHERE k.id = ${keyId}
           FOR NO KEY UPDATE OF k
      )`

/**
 * Takes `amount` from the wallet: monthly first, then top-up, whose part hookline_take_topup
 * takes from the grants (soonest-expiring first) after the wallet's lock, the hold remembering
 * which. The wallet row is locked and re-read, updated only when the total covers the amount, the
 * period has not ended, no top-up grant is due to expire, and the
 * key's spend in its period stays within its limit (the key row is locked and counted in the
 * same statement; `over_limit` says it was the limit that refused), and its
 * journal rows (and, with `hold`, the pending hold, which remembers the period it was opened in)
 * are written alongside. No row: no wallet. `rollover_due` / `expiry_due`: nothing changed, roll
 * over or expire the due grants first.
 * Balances null: the wallet is short, nothing changed. Without a hold the journal rows are
 * `reserve` rows with no hold, final as they stand (a charge taken at once).
 */
export const debitStatement = (
  sql: SqlClient.SqlClient,
  debit: DebitInput,
  now: Date,
  hold: {
    readonly holdId: string
    readonly expiresAt: Statement.Fragment
    /**
     * The commit does not wait for the disk (synchronous_commit off, for this statement only).
     * Only for a hold its request settles or refunds before answering: that synchronous commit
     * flushes the log past this one, so nothing is answered on a hold a crash could take back,
     * and a crash before it loses the hold together with its debit and journal rows.
     */
    readonly commitWithoutFlush: boolean
  } | null
) => {
  const { accountId, amount, operation } = debit
  const at = timeParameter(sql, now)
  const holdCte = hold === null
    ? sql`hold AS (SELECT NULL::text AS id)`
    : sql`hold AS (
        INSERT INTO holds (id, account_id, monthly_amount, topup_amount, operation, reference_id, request_id, expires_at, period_end,
                           key_id, key_period_end, created_at, topup_grants)
        SELECT ${hold.holdId}, ${accountId}, from_monthly, from_topup, ${operation},
               ${debit.referenceId}, ${debit.requestId}, ${hold.expiresAt}, period_end, ${debit.keyId}, key_period_end, ${at},
               (SELECT grants FROM taken)
          FROM upd${hold.commitWithoutFlush ? sql`, ${sql.literal(commitWithoutFlush)}` : sql``}
        RETURNING id
      )`
  return sql`
    WITH old AS (
      SELECT monthly_balance AS m, topup_balance AS t, monthly_period_end AS pe, next_grant_expiry AS nge
        FROM wallets WHERE account_id = ${accountId} FOR UPDATE
    ),
    ${keyBudgetCte(sql, debit.keyId, at)},
    upd AS (
      UPDATE wallets w
         SET monthly_balance = o.m - LEAST(o.m, ${amount}),
             topup_balance = o.t - (${amount} - LEAST(o.m, ${amount}))
        FROM old o LEFT JOIN budget k ON true
       WHERE w.account_id = ${accountId}
         AND o.m + o.t >= ${amount}
         AND (o.pe IS NULL OR o.pe > ${at})
         AND (o.nge IS NULL OR o.nge > ${at})
         AND (k.lim IS NULL OR k.spent + ${amount} <= k.lim)
      RETURNING LEAST(o.m, ${amount}) AS from_monthly, ${amount} - LEAST(o.m, ${amount}) AS from_topup,
                w.monthly_balance, w.topup_balance, o.t AS topup_before, o.pe AS period_end,
                k.spent AS key_spent, k.kpe AS key_period_end
    ),
    taken AS (
      SELECT hookline_take_topup(${accountId}, from_topup, ${at}) AS grants FROM upd WHERE from_topup > 0
    ),
    key_spend AS (
      UPDATE api_keys SET period_spent = u.key_spent + ${amount}, spend_period_end = u.key_period_end
        FROM upd u WHERE api_keys.id = ${debit.keyId} AND u.key_period_end IS NOT NULL
      RETURNING 1
    ),
    ${holdCte},
    journal AS (
      INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, hold_id, operation, reference_id, request_id, key_id,
                                  created_at)
      SELECT ${newId("txn")}, ${accountId}, 'reserve', 'monthly', -from_monthly, monthly_balance, topup_before,
             (SELECT id FROM hold), ${operation}, ${debit.referenceId}, ${debit.requestId}, ${debit.keyId}, ${at}
        FROM upd WHERE from_monthly > 0
      UNION ALL
      SELECT ${newId("txn")}, ${accountId}, 'reserve', 'topup', -from_topup, monthly_balance, topup_balance,
             (SELECT id FROM hold), ${operation}, ${debit.referenceId}, ${debit.requestId}, ${debit.keyId}, ${at}
        FROM upd, taken WHERE from_topup > 0
      RETURNING 1
    )
    SELECT (o.pe IS NOT NULL AND o.pe <= ${at}) AS rollover_due, (o.nge IS NOT NULL AND o.nge <= ${at}) AS expiry_due, u.monthly_balance, u.topup_balance,
           COALESCE(k.spent + ${amount} > k.lim, false) AS over_limit, k.lim AS spend_limit, k.kpe AS key_period_end
      FROM old o LEFT JOIN upd u ON true LEFT JOIN budget k ON true`
}

/**
 * What a hold's release gives back to its top-up grants: `back_t` credits, to the grants taken
 * last first (the hold's `topup_grants`, in the order taken). `kept`: what went back to grants
 * still live; the rest belonged to grants that expired meanwhile, and expires with them. The
 * grants' own rows decide (the UPDATE re-reads each), so an expiry that committed while this
 * statement waited for the wallet's lock is seen.
 */
const grantsBackCtes = (sql: SqlClient.SqlClient, at: Statement.Fragment) =>
  sql`gb AS (
      SELECT g.id, LEAST(g.n, GREATEST(0, h.back_t - g.after)) AS back
        FROM h CROSS JOIN LATERAL (
          SELECT e->>0 AS id, (e->>1)::bigint AS n,
                 COALESCE(sum((e->>1)::bigint) OVER (ORDER BY ord DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS after
            FROM jsonb_array_elements(h.topup_grants) WITH ORDINALITY AS x (e, ord)
        ) g
       WHERE h.back_t > 0
    ),
    kept AS (
      UPDATE topup_grants t SET remaining = t.remaining + gb.back FROM gb
       WHERE t.id = gb.id AND gb.back > 0 AND t.expired_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ${at})
      RETURNING gb.back
    )`

/**
 * Resolves a pending hold: posts `charge` (≤ reserved; monthly first, as it was spent) and
 * releases the rest to the buckets it came from, top-up first. No row when the hold was not
 * pending (already resolved) or `charge` exceeds it: nothing changes.
 *
 * The wallet row is locked first, so a rollover is either wholly before or wholly after: a hold
 * opened in an earlier monthly period (the wallet's period end moved since) releases its monthly
 * rest and expires it at once, journaled, instead of adding it to the new grant. What the hold
 * gives back is given back to its key's budget too, when the key is still in the hold's period. A settled
 * request charge draws its place in the credit history (`history_seq`) here.
 */
export const resolveStatement = (
  sql: SqlClient.SqlClient,
  holdId: string,
  charge: number,
  status: "settled" | "refunded" | "voided",
  now: Date
) => {
  const at = timeParameter(sql, now)
  return sql`
    WITH cur AS (
      SELECT account_id, monthly_period_end AS pe FROM wallets
       WHERE account_id = (SELECT account_id FROM holds WHERE id = ${holdId})
       FOR UPDATE
    ),
    h AS (
      UPDATE holds
         SET status = ${status},
             settled_monthly = LEAST(monthly_amount, ${charge}),
             settled_topup = ${charge} - LEAST(monthly_amount, ${charge}),
             resolved_at = ${at},
             history_seq = CASE WHEN ${status} = 'settled' AND ${charge} > 0 AND operation <> 'prediction'
                                THEN nextval(pg_get_serial_sequence('credit_journal', 'seq')) END
        FROM cur
       WHERE holds.id = ${holdId} AND holds.status = 'pending' AND ${charge} <= holds.monthly_amount + holds.topup_amount
      RETURNING holds.account_id, holds.operation, holds.reference_id, holds.request_id,
                holds.monthly_amount - LEAST(holds.monthly_amount, ${charge}) AS back_m,
                holds.topup_amount - (${charge} - LEAST(holds.monthly_amount, ${charge})) AS back_t,
                holds.period_end IS DISTINCT FROM cur.pe AS lapsed, holds.key_id, holds.key_period_end, holds.topup_grants
    ),
    ${grantsBackCtes(sql, at)},
    k AS (
      SELECT h.*, CASE WHEN h.lapsed THEN 0 ELSE h.back_m END AS kept_m, COALESCE((SELECT sum(back) FROM kept), 0) AS kept_t FROM h
    ),
    w AS (
      UPDATE wallets SET monthly_balance = monthly_balance + k.kept_m, topup_balance = topup_balance + k.kept_t
        FROM k WHERE wallets.account_id = k.account_id
      RETURNING wallets.monthly_balance, wallets.topup_balance
    ),
    key_back AS (
      UPDATE api_keys SET period_spent = period_spent - (h.back_m + h.back_t)
        FROM h WHERE api_keys.id = h.key_id AND api_keys.spend_period_end = h.key_period_end AND h.back_m + h.back_t > 0
      RETURNING 1
    ),
    journal AS (
      INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, hold_id, operation, reference_id, request_id, reason, key_id,
                                  created_at)
      SELECT ${newId("txn")}, k.account_id, 'release', 'topup', k.back_t, w.monthly_balance - k.kept_m, w.topup_balance + k.back_t - k.kept_t,
             ${holdId}, k.operation, k.reference_id, k.request_id, NULL, k.key_id, ${at}
        FROM k, w WHERE k.back_t > 0
      UNION ALL
      SELECT ${newId("txn")}, k.account_id, 'expire', 'topup', k.kept_t - k.back_t, w.monthly_balance - k.kept_m, w.topup_balance,
             ${holdId}, k.operation, k.reference_id, k.request_id, 'top-up grant expired while held', k.key_id, ${at}
        FROM k, w WHERE k.back_t > k.kept_t
      UNION ALL
      SELECT ${newId("txn")}, k.account_id, 'release', 'monthly', k.back_m, w.monthly_balance - k.kept_m + k.back_m, w.topup_balance,
             ${holdId}, k.operation, k.reference_id, k.request_id, NULL, k.key_id, ${at}
        FROM k, w WHERE k.back_m > 0
      UNION ALL
      SELECT ${newId("txn")}, k.account_id, 'expire', 'monthly', -k.back_m, w.monthly_balance, w.topup_balance,
             ${holdId}, k.operation, k.reference_id, k.request_id, 'monthly period ended while held', k.key_id, ${at}
        FROM k, w WHERE k.back_m > 0 AND k.lapsed
      RETURNING 1
    )
    SELECT ${charge}::int AS charged, w.monthly_balance, w.topup_balance, (SELECT operation FROM h) AS operation FROM w`
}
