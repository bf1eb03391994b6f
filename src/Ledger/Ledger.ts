/**
 * The Ledger: the only code that writes balances, holds and journal rows.
 *
 * Every operation is one SQL statement (data-modifying CTEs) or one transaction with a row
 * lock, so its correctness never depends on timing. Every balance change writes a journal row,
 * so for each account and bucket `balance == sum(journal.amount)` holds at all times.
 *
 * Holds follow two-phase transfer semantics: reserve (pending) → settle (post ≤ reserved,
 * release the rest) or refund/void (release all). A hold changes state at most once: each
 * resolving statement matches `status = 'pending'` only.
 */
import { SqlClient } from "@effect/sql"
import { Config, Duration, Effect, Option, Schema } from "effect"
import { maxBalance } from "./Api.js"
import type { Bucket } from "./Domain.js"
import { InsufficientCredits, ValidationFailed } from "../Errors.js"
import { newId } from "../Ids.js"
import { recordCreditsCharged, recordHoldResolved } from "../Observability/Metrics.js"
import { orDieOnDb, StatementRunner } from "../Sql.js"
import { toNullableTimestamp } from "../Schemas.js"
import type { Wallet } from "./Api.js"

export const LedgerConfig = Config.all({
  /** A hold left pending this long by a crashed request is voided by the sweeper. */
  holdTimeout: Config.duration("HOLD_TIMEOUT").pipe(Config.withDefault(Duration.minutes(10))),
  sweepInterval: Config.duration("LEDGER_SWEEP_INTERVAL").pipe(Config.withDefault(Duration.seconds(30)))
})

/** What a hold is for; the credit history names it. */
export type Operation = "search" | "list" | "hook" | "prediction"

export interface Balances {
  readonly monthly: number
  readonly topup: number
}

export interface Hold {
  readonly id: string
  readonly accountId: string
  readonly amount: number
  readonly balancesAfter: Balances
}

export interface Resolution {
  /** Credits this hold finally took (0 for a refund). */
  readonly charged: number
  readonly balancesAfter: Balances
}

export interface ReserveOptions {
  readonly operation: Operation
  readonly referenceId?: string | null
  readonly requestId?: string | null
  /** false: the hold has no timeout (a prediction's hold is resolved by its job's lifecycle). */
  readonly expires?: boolean
}

const WalletRow = Schema.Struct({
  monthly_balance: Schema.Number,
  topup_balance: Schema.Number,
  monthly_period_end: Schema.NullOr(Schema.DateFromSelf)
})

const ReserveRow = Schema.Struct({
  found: Schema.Boolean,
  rollover_due: Schema.Boolean,
  from_monthly: Schema.NullOr(Schema.Number),
  from_topup: Schema.NullOr(Schema.Number),
  monthly_balance: Schema.NullOr(Schema.Number),
  topup_balance: Schema.NullOr(Schema.Number)
})

const ResolveRow = Schema.Struct({
  charged: Schema.Number,
  monthly_balance: Schema.Number,
  topup_balance: Schema.Number,
  operation: Schema.String
})

const decodeOne = <A, I>(schema: Schema.Schema<A, I>) => (rows: ReadonlyArray<unknown>) =>
  rows.length === 0 ? Effect.succeed(Option.none<A>()) : Effect.map(Schema.decodeUnknown(schema)(rows[0]), Option.some)

export class Ledger extends Effect.Service<Ledger>()("hookline/Ledger", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const run = yield* StatementRunner
    const config = yield* LedgerConfig
    const holdTimeoutMs = Duration.toMillis(config.holdTimeout)

    /**
     * Starts a new monthly period for every wallet whose period has ended (or only `accountId`'s):
     * unused monthly credits expire, the balance is reset to the account's grant, and the period
     * end moves to the first anchor + n months after now. Idempotent and safe to race: the wallet
     * row lock serialises concurrent rollovers, and the second finds nothing due.
     */
    const rollover = (accountId: string | null) =>
      sql`
        WITH due AS (
          SELECT w.account_id, w.monthly_balance AS m, w.topup_balance AS t, a.monthly_grant AS g,
                 (SELECT w.period_anchor + make_interval(months => k)
                    FROM generate_series(1, 12000) k
                   WHERE w.period_anchor + make_interval(months => k) > now()
                   ORDER BY k LIMIT 1) AS next_end
            FROM wallets w JOIN accounts a ON a.id = w.account_id
           WHERE w.monthly_period_end IS NOT NULL AND w.monthly_period_end <= now()
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
          INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reason)
          SELECT 'txn_' || replace(gen_random_uuid()::text, '-', ''), account_id, 'expire', 'monthly', -m, 0, t, 'rollover', 'monthly period ended'
            FROM due WHERE m > 0
          UNION ALL
          SELECT 'txn_' || replace(gen_random_uuid()::text, '-', ''), account_id, 'grant', 'monthly', g, g, t, 'rollover', 'monthly grant'
            FROM due WHERE g > 0
          RETURNING 1
        )
        SELECT count(*)::int AS rolled FROM upd
      `.pipe(Effect.map((rows) => Number((rows[0] as { rolled: number } | undefined)?.rolled ?? 0)))

    const readWallet = (accountId: string) =>
      run(sql`SELECT monthly_balance, topup_balance, monthly_period_end FROM wallets WHERE account_id = ${accountId}`).pipe(
        Effect.flatMap(decodeOne(WalletRow))
      )

    /** The wallet, after any rollover that is due. */
    const wallet = (accountId: string) =>
      Effect.gen(function*() {
        let row = yield* readWallet(accountId)
        if (Option.isSome(row) && row.value.monthly_period_end !== null && row.value.monthly_period_end <= new Date()) {
          yield* rollover(accountId)
          row = yield* readWallet(accountId)
        }
        const found = yield* row
        return {
          object: "wallet",
          monthly_balance: found.monthly_balance,
          monthly_period_end: toNullableTimestamp(found.monthly_period_end),
          topup_balance: found.topup_balance
        } satisfies Wallet
      }).pipe(Effect.catchTag("NoSuchElementException", () => Effect.dieMessage(`No wallet for account ${accountId}`)))

    /**
     * Takes `amount` from the wallet: monthly first, then top-up. One statement: the wallet row
     * is locked and re-read, updated only when the total covers the amount, and its journal rows
     * (and, for a hold, the pending hold) are written alongside. Fails with InsufficientCredits
     * (nothing changed) when the total is short.
     *
     * `holdId` null is a charge taken at once: its journal rows are `reserve` rows with no hold,
     * final as they stand (the credit history lists them as charges).
     */
    const debit = (accountId: string, amount: number, holdId: string | null, options: ReserveOptions) =>
      Effect.gen(function*() {
        if (!Number.isInteger(amount) || amount <= 0) return yield* Effect.dieMessage(`Invalid debit amount ${amount}`)
        // The database clock decides expiry, so processes with skewed clocks agree.
        const expiresAt = options.expires === false ? sql`NULL::timestamptz` : sql`now() + make_interval(secs => ${holdTimeoutMs / 1000})`
        const hold = holdId === null
          ? sql`hold AS (SELECT NULL::text AS id)`
          : sql`hold AS (
            INSERT INTO holds (id, account_id, monthly_amount, topup_amount, operation, reference_id, request_id, expires_at)
            SELECT ${holdId}, ${accountId}, from_monthly, from_topup, ${options.operation},
                   ${options.referenceId ?? null}, ${options.requestId ?? null}, ${expiresAt}
              FROM upd
            RETURNING id
          )`
        const attempt = run(sql`
          WITH old AS (
            SELECT monthly_balance AS m, topup_balance AS t, monthly_period_end AS pe
              FROM wallets WHERE account_id = ${accountId} FOR UPDATE
          ),
          upd AS (
            UPDATE wallets w
               SET monthly_balance = o.m - LEAST(o.m, ${amount}),
                   topup_balance = o.t - (${amount} - LEAST(o.m, ${amount}))
              FROM old o
             WHERE w.account_id = ${accountId}
               AND o.m + o.t >= ${amount}
               AND (o.pe IS NULL OR o.pe > now())
            RETURNING LEAST(o.m, ${amount}) AS from_monthly, ${amount} - LEAST(o.m, ${amount}) AS from_topup,
                      w.monthly_balance, w.topup_balance, o.t AS topup_before
          ),
          ${hold},
          journal AS (
            INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, hold_id, operation, reference_id, request_id)
            SELECT ${newId("txn")}, ${accountId}, 'reserve', 'monthly', -from_monthly, monthly_balance, topup_before,
                   (SELECT id FROM hold), ${options.operation}, ${options.referenceId ?? null}, ${options.requestId ?? null}
              FROM upd WHERE from_monthly > 0
            UNION ALL
            SELECT ${newId("txn")}, ${accountId}, 'reserve', 'topup', -from_topup, monthly_balance, topup_balance,
                   (SELECT id FROM hold), ${options.operation}, ${options.referenceId ?? null}, ${options.requestId ?? null}
              FROM upd WHERE from_topup > 0
            RETURNING 1
          )
          SELECT true AS found, (o.pe IS NOT NULL AND o.pe <= now()) AS rollover_due,
                 u.from_monthly, u.from_topup, u.monthly_balance, u.topup_balance
            FROM old o LEFT JOIN upd u ON true
        `).pipe(Effect.flatMap(decodeOne(ReserveRow)))

        let row = yield* attempt
        if (Option.isSome(row) && row.value.rollover_due) {
          yield* rollover(accountId)
          row = yield* attempt
        }
        if (Option.isNone(row)) return yield* Effect.dieMessage(`No wallet for account ${accountId}`)
        const r = row.value
        if (r.monthly_balance === null || r.topup_balance === null) {
          yield* sql`SELECT hookline_wallet_depleted(${accountId})` // the first refusal since a grant sends wallet.depleted
          return yield* new InsufficientCredits({
            message: `This request ${holdId === null ? "costs" : "reserves"} ${amount} credits and the wallet holds fewer.`
          })
        }
        return { monthly: r.monthly_balance, topup: r.topup_balance } satisfies Balances
      })

    /** Takes `amount` into a pending hold (see `debit`), to settle or refund later. */
    const reserve = (accountId: string, amount: number, options: ReserveOptions) => {
      const holdId = newId("hold")
      return debit(accountId, amount, holdId, options).pipe(
        Effect.map((balancesAfter): Hold => ({ id: holdId, accountId, amount, balancesAfter })),
        Effect.withSpan("Ledger.reserve", { attributes: { accountId, amount } })
      )
    }

    /**
     * Takes a fixed `amount` at once, with no hold: for a request whose price is known before it
     * runs and whose work is done (a single hook), one round trip instead of reserve + settle.
     */
    const charge = (accountId: string, amount: number, options: ReserveOptions) =>
      debit(accountId, amount, null, options).pipe(
        Effect.tap(() => recordCreditsCharged(options.operation, amount)),
        Effect.withSpan("Ledger.charge", { attributes: { accountId, amount } })
      )

    /**
     * Resolves a pending hold: posts `charge` (≤ reserved; monthly first, as it was spent) and
     * releases the rest to the buckets it came from, top-up first. Returns None when the hold
     * was not pending (already resolved): the caller's second attempt changes nothing.
     */
    const resolve = (holdId: string, charge: number, status: "settled" | "refunded" | "voided") =>
      sql`
        WITH h AS (
          UPDATE holds
             SET status = ${status},
                 settled_monthly = LEAST(monthly_amount, ${charge}),
                 settled_topup = ${charge} - LEAST(monthly_amount, ${charge}),
                 resolved_at = now()
           WHERE id = ${holdId} AND status = 'pending' AND ${charge} <= monthly_amount + topup_amount
          RETURNING account_id, operation, reference_id, request_id,
                    monthly_amount - LEAST(monthly_amount, ${charge}) AS back_m,
                    topup_amount - (${charge} - LEAST(monthly_amount, ${charge})) AS back_t
        ),
        w AS (
          UPDATE wallets SET monthly_balance = monthly_balance + h.back_m, topup_balance = topup_balance + h.back_t
            FROM h WHERE wallets.account_id = h.account_id
          RETURNING wallets.monthly_balance, wallets.topup_balance
        ),
        journal AS (
          INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, hold_id, operation, reference_id, request_id)
          SELECT ${newId("txn")}, h.account_id, 'release', 'topup', h.back_t, w.monthly_balance - h.back_m, w.topup_balance,
                 ${holdId}, h.operation, h.reference_id, h.request_id
            FROM h, w WHERE h.back_t > 0
          UNION ALL
          SELECT ${newId("txn")}, h.account_id, 'release', 'monthly', h.back_m, w.monthly_balance, w.topup_balance,
                 ${holdId}, h.operation, h.reference_id, h.request_id
            FROM h, w WHERE h.back_m > 0
          RETURNING 1
        )
        SELECT ${charge}::int AS charged, w.monthly_balance, w.topup_balance, (SELECT operation FROM h) AS operation FROM w
      `.pipe(
        Effect.flatMap(decodeOne(ResolveRow)),
        Effect.tap(Option.match({
          onNone: () => Effect.void,
          onSome: (r) => recordHoldResolved(r.operation, status, r.charged)
        })),
        Effect.map(Option.map((r): Resolution => ({
          charged: r.charged,
          balancesAfter: { monthly: r.monthly_balance, topup: r.topup_balance }
        }))),
        Effect.withSpan(`Ledger.${status === "settled" ? "settle" : status === "refunded" ? "refund" : "void"}`, {
          attributes: { holdId, charge }
        })
      )

    const settle = (holdId: string, amount: number) =>
      Number.isInteger(amount) && amount >= 0
        ? resolve(holdId, amount, "settled")
        : Effect.dieMessage(`Invalid settle amount ${amount}`)

    const refund = (holdId: string) => resolve(holdId, 0, "refunded")

    /** Voids holds left pending past their timeout (a crashed request); returns how many. */
    const voidExpiredHolds = Effect.gen(function*() {
      const expired = yield* sql<{ id: string }>`
        SELECT id FROM holds WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= now()
        ORDER BY expires_at LIMIT 500`
      let voided = 0
      for (const { id } of expired) {
        const done = yield* resolve(id, 0, "voided")
        if (Option.isSome(done)) voided++
      }
      if (voided > 0) yield* Effect.logWarning("voided expired holds").pipe(Effect.annotateLogs({ voided }))
      return voided
    })

    /**
     * Adds credits to one bucket (an admin or billing grant), journaled, and answers the wallet.
     * A `referenceId` (the billing system's id) credits at most once per account: the journal's
     * unique index decides atomically, so of concurrent grants with one reference exactly one
     * credits. A repeat with the same bucket and amount credits nothing and answers the wallet;
     * with another bucket or amount it fails with ValidationFailed.
     */
    const grant = (accountId: string, bucket: Bucket, amount: number, details: {
      readonly reason?: string | null
      readonly referenceId?: string | null
      readonly requestId?: string | null
    }) =>
      Effect.gen(function*() {
        const referenceId = details.referenceId ?? null
        const toMonthly = bucket === "monthly" ? amount : 0
        const toTopup = bucket === "topup" ? amount : 0
        const rows = yield* sql<{ found: number; granted: number; overflow: number }>`
          WITH old AS (
            SELECT monthly_balance AS m, topup_balance AS t FROM wallets WHERE account_id = ${accountId} FOR UPDATE
          ),
          journal AS (
            INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reference_id, request_id, reason)
            SELECT ${newId("txn")}, ${accountId}, 'grant', ${bucket}, ${amount}, m + ${toMonthly}, t + ${toTopup},
                   'admin', ${referenceId}, ${details.requestId ?? null}, ${details.reason ?? null}
              FROM old WHERE m + ${toMonthly} <= ${maxBalance} AND t + ${toTopup} <= ${maxBalance}
            ON CONFLICT (account_id, reference_id)
              WHERE entry_type = 'grant' AND operation = 'admin' AND reference_id IS NOT NULL
              DO NOTHING
            RETURNING 1
          ),
          w AS (
            UPDATE wallets
               SET monthly_balance = monthly_balance + ${toMonthly}, topup_balance = topup_balance + ${toTopup}
             WHERE account_id = ${accountId} AND EXISTS (SELECT 1 FROM journal)
            RETURNING 1
          )
          SELECT (SELECT count(*) FROM old)::int AS found, (SELECT count(*) FROM w)::int AS granted,
                 (SELECT count(*) FROM old WHERE m + ${toMonthly} > ${maxBalance} OR t + ${toTopup} > ${maxBalance})::int AS overflow
        `
        if ((rows[0]?.found ?? 0) === 0) return yield* Effect.dieMessage(`No wallet for account ${accountId}`)
        if ((rows[0]?.overflow ?? 0) > 0) {
          return yield* new ValidationFailed({ message: `amount: the ${bucket} balance would pass ${maxBalance} credits, the most a balance holds.` })
        }
        if ((rows[0]?.granted ?? 0) === 0 && referenceId !== null) {
          const first = yield* sql<{ bucket: string; amount: number }>`
            SELECT bucket, amount FROM credit_journal
             WHERE account_id = ${accountId} AND reference_id = ${referenceId}
               AND entry_type = 'grant' AND operation = 'admin'`
          const earlier = first[0]
          if (earlier !== undefined && (earlier.bucket !== bucket || earlier.amount !== amount)) {
            return yield* new ValidationFailed({
              message: `reference: ${JSON.stringify(referenceId)} already granted ${earlier.amount} ${earlier.bucket} credits to this account; ` +
                "a grant with the same reference must have the same bucket and amount."
            })
          }
        }
        return yield* wallet(accountId)
      }).pipe(Effect.withSpan("Ledger.grant", { attributes: { accountId, bucket, amount } }))

    /**
     * Opens the wallet of a new account with its starting balances, journaled as grants.
     * The monthly period starts now when the account has a monthly grant.
     */
    const openWallet = (accountId: string, opening: {
      readonly monthlyGrant: number
      readonly monthlyBalance: number
      readonly topupBalance: number
    }) =>
      Effect.gen(function*() {
        yield* sql`
          INSERT INTO wallets (account_id, monthly_balance, topup_balance, period_anchor, monthly_period_end)
          VALUES (${accountId}, 0, 0, now(), ${opening.monthlyGrant > 0 ? sql`now() + interval '1 month'` : null})`
        if (opening.monthlyBalance > 0) {
          yield* grant(accountId, "monthly", opening.monthlyBalance, { reason: "opening balance" })
        }
        if (opening.topupBalance > 0) {
          yield* grant(accountId, "topup", opening.topupBalance, { reason: "opening balance" })
        }
      }).pipe(sql.withTransaction)

    /**
     * A plan change starts a new monthly period now: unused monthly credits expire and the
     * new grant is credited (none, and no period end, for plans without a grant). Runs in the
     * caller's transaction when there is one, so the account row and the webhook change with it.
     */
    const startNewPeriod = (accountId: string, monthlyGrant: number) =>
      sql`
        WITH old AS (
          SELECT monthly_balance AS m, topup_balance AS t FROM wallets WHERE account_id = ${accountId} FOR UPDATE
        ),
        upd AS (
          UPDATE wallets w
             SET monthly_balance = ${monthlyGrant},
                 period_anchor = now(),
                 monthly_period_end = ${monthlyGrant > 0 ? sql`now() + interval '1 month'` : null}
            FROM old WHERE w.account_id = ${accountId}
          RETURNING old.m, old.t
        ),
        journal AS (
          INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, operation, reason)
          SELECT ${newId("txn")}, ${accountId}, 'expire', 'monthly', -m, 0, t, 'rollover', 'plan changed' FROM upd WHERE m > 0
          UNION ALL
          SELECT ${newId("txn")}, ${accountId}, 'grant', 'monthly', ${monthlyGrant}, ${monthlyGrant}, t, 'rollover', 'plan changed'
            FROM upd WHERE ${monthlyGrant} > 0
          RETURNING 1
        )
        SELECT count(*)::int AS n FROM upd
      `.pipe(Effect.asVoid, Effect.withSpan("Ledger.startNewPeriod", { attributes: { accountId, monthlyGrant } }))

    return {
      wallet: (accountId: string) => orDieOnDb(wallet(accountId)),
      reserve: (accountId: string, amount: number, options: ReserveOptions) => orDieOnDb(reserve(accountId, amount, options)),
      charge: (accountId: string, amount: number, options: ReserveOptions) => orDieOnDb(charge(accountId, amount, options)),
      settle: (holdId: string, amount: number) => orDieOnDb(settle(holdId, amount)),
      refund: (holdId: string) => orDieOnDb(refund(holdId)),
      voidExpiredHolds: orDieOnDb(voidExpiredHolds),
      grant: (...args: Parameters<typeof grant>) => orDieOnDb(grant(...args)),
      openWallet: (...args: Parameters<typeof openWallet>) => orDieOnDb(openWallet(...args)),
      startNewPeriod: (accountId: string, monthlyGrant: number) => orDieOnDb(startNewPeriod(accountId, monthlyGrant)),
      rollover: (accountId: string | null) => orDieOnDb(rollover(accountId)),
      config
    } as const
  })
}) {}
