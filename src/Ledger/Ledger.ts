/**
 * The Ledger: the only service that moves credits. It decides (rollover first, refuse when short,
 * a grant's reference at most once); LedgerRepo's statements move the money, each one SQL
 * statement with the wallet row locked, journaling every balance change.
 *
 * Holds follow two-phase transfer semantics: reserve (pending) → settle (post ≤ reserved,
 * release the rest) or refund/void (release all). A hold changes state at most once: each
 * resolving statement matches `status = 'pending'` only.
 */
import { Config, Context, Duration, Effect, Layer, Option } from "effect"
import { InsufficientCredits, SpendLimitReached, ValidationFailed } from "../Errors.js"
import { newId } from "../Ids.js"
import { recordCreditsCharged, recordHoldResolved } from "../Observability/Metrics.js"
import { currentDate } from "../Repository.js"
import { tracedFn } from "../Observability/Tracing.js"
import {
  type Balances,
  type Bucket,
  type GrantDetails,
  type Hold,
  maxBalance,
  type Resolution,
  type ReserveOptions,
  type TopupGrant,
  type WalletState
} from "./Domain.js"
import { grantOperations } from "./LedgerGrants.js"
import { type DebitRow, LedgerRepo, type ResolveRow } from "./Repo.js"

export type { Balances, Hold, Operation, Resolution, ReserveOptions, WalletState } from "./Domain.js"

export const LedgerConfig = Config.all({
  /** A hold left pending this long by a crashed request is voided by the sweeper. */
  holdTimeout: Config.Duration("HOLD_TIMEOUT").pipe(Config.withDefault(Duration.minutes(10))),
  sweepInterval: Config.Duration("LEDGER_SWEEP_INTERVAL").pipe(Config.withDefault(Duration.seconds(30))),
  /** How often the sweep expires the top-up grants that are due (a read or debit of the wallet expires them first too). */
  grantExpiryInterval: Config.Duration("GRANT_EXPIRY_INTERVAL").pipe(Config.withDefault(Duration.seconds(30)))
})

/** How many expired holds one sweep voids at most. */
const sweepBatch = 500

const noWallet = (accountId: string) => Effect.die(new Error(`No wallet for account ${accountId}`))

const toResolution = Option.map((row: ResolveRow): Resolution => ({
  charged: row.charged,
  balancesAfter: { monthly: row.monthly_balance, topup: row.topup_balance }
}))

type LedgerSettings = Config.Success<typeof LedgerConfig>

/**
 * What is due on the account before anything is read or taken: the rollover of a period that
 * ended, then the expiry of top-up grants that are due. Both are no-ops when nothing is due.
 */
const catchUp = (repo: LedgerRepo["Service"], accountId: string) =>
  Effect.andThen(repo.rollOver(accountId), repo.expireGrants(accountId))

/** The wallet and its monthly periods. */
const periodOperations = (repo: LedgerRepo["Service"]) => {
  /** Monthly periods that ended, for every wallet (null) or one; returns how many rolled over. */
  const rollover = tracedFn("Ledger.rollover", (accountId: string | null) => repo.rollOver(accountId))

  /** The wallet, after any rollover and grant expiry that is due. */
  const wallet = tracedFn("Ledger.wallet", Effect.fnUntraced(function*(accountId: string) {
    let row = yield* repo.findWallet(accountId)
    const now = yield* currentDate
    const due = (at: Date | null) => at !== null && at <= now
    if (Option.isSome(row) && (due(row.value.monthly_period_end) || due(row.value.next_grant_expiry))) {
      yield* catchUp(repo, accountId)
      row = yield* repo.findWallet(accountId)
    }
    if (Option.isNone(row)) return yield* noWallet(accountId)
    return {
      monthly: row.value.monthly_balance,
      topup: row.value.topup_balance,
      periodEnd: row.value.monthly_period_end
    } satisfies WalletState
  }))

  /**
   * A plan change starts a new monthly period now: unused monthly credits expire and the
   * new grant is credited (none, and no period end, for plans without a grant). Runs in the
   * caller's transaction when there is one, so the account row and the webhook change with it.
   */
  const startNewPeriod = tracedFn("Ledger.startNewPeriod", (accountId: string, monthlyGrant: number) =>
    repo.startNewPeriod({ accountId, monthlyGrant }))

  return { rollover, wallet, startNewPeriod }
}

/** Taking credits: into a hold, or at once. */
const debitOperations = (repo: LedgerRepo["Service"], config: LedgerSettings) => {
  /**
   * Runs one debit statement; when the period has ended or a top-up grant is due it catches up
   * (rollover, expiry) and tries once more. Fails
   * (nothing changed) with SpendLimitReached when the key's limit refused it, else with
   * InsufficientCredits when the wallet is short.
   */
  const debit = <E, R>(
    accountId: string,
    keyId: string | null,
    amount: number,
    verb: "costs" | "reserves",
    attempt: Effect.Effect<Option.Option<DebitRow>, E, R>
  ) =>
    Effect.gen(function*() {
      if (!Number.isInteger(amount) || amount <= 0) return yield* Effect.die(new Error(`Invalid debit amount ${amount}`))
      let row = yield* attempt
      if (Option.isSome(row) && (row.value.rollover_due || row.value.expiry_due)) {
        yield* catchUp(repo, accountId)
        row = yield* attempt
      }
      if (Option.isNone(row)) return yield* noWallet(accountId)
      const { key_period_end, monthly_balance, over_limit, spend_limit, topup_balance } = row.value
      if (over_limit && key_period_end !== null && keyId !== null) {
        yield* repo.noteSpendLimitReached(keyId)
        return yield* new SpendLimitReached({
          message: `This request ${verb} ${amount} credits and would pass this key's spend limit of ${spend_limit} credits ` +
            `for the period ending ${key_period_end.toISOString()}.`
        })
      }
      if (monthly_balance === null || topup_balance === null) {
        yield* repo.noteDepleted(accountId)
        return yield* new InsufficientCredits({ message: `This request ${verb} ${amount} credits and the wallet holds fewer.` })
      }
      return { monthly: monthly_balance, topup: topup_balance } satisfies Balances
    })

  const debitFields = (accountId: string, amount: number, options: ReserveOptions) => ({
    accountId,
    amount,
    operation: options.operation,
    referenceId: options.referenceId ?? null,
    requestId: options.requestId ?? null,
    keyId: options.keyId ?? null
  })

  /** Takes `amount` into a pending hold (monthly first, then top-up), to settle or refund later. */
  const reserve = tracedFn("Ledger.reserve", Effect.fnUntraced(function*(accountId: string, amount: number, options: ReserveOptions) {
    yield* Effect.annotateCurrentSpan({ accountId, amount })
    const holdId = newId("hold")
    const balancesAfter = yield* debit(accountId, options.keyId ?? null, amount, "reserves", repo.reserveHold({
      ...debitFields(accountId, amount, options),
      holdId,
      expiresInSeconds: options.expires === false ? null : Duration.toMillis(config.holdTimeout) / 1000
    }))
    return { id: holdId, accountId, amount, balancesAfter } satisfies Hold
  }))

  /**
   * Takes a fixed `amount` at once, with no hold: for a request whose price is known before it
   * runs and whose work is done (a single hook), one round trip instead of reserve + settle.
   */
  const charge = tracedFn("Ledger.charge", Effect.fnUntraced(function*(accountId: string, amount: number, options: ReserveOptions) {
    yield* Effect.annotateCurrentSpan({ accountId, amount })
    const balances = yield* debit(accountId, options.keyId ?? null, amount, "costs", repo.chargeAtOnce(debitFields(accountId, amount, options)))
    yield* recordCreditsCharged(options.operation, amount)
    return balances
  }))

  return { reserve, charge }
}

/** Resolving holds: settle, refund, and the sweeper's void. */
const resolveOperations = (repo: LedgerRepo["Service"]) => {
  /** Runs a resolving statement, counts what it resolved, and answers the Resolution. */
  const resolved = <E, R>(
    status: "settled" | "refunded" | "voided",
    statement: Effect.Effect<Option.Option<ResolveRow>, E, R>
  ) =>
    Effect.flatMap(statement, (row) =>
      Option.match(row, {
        onNone: () => Effect.succeed(Option.none<Resolution>()),
        onSome: (found) => recordHoldResolved(found.operation, status, found.charged).pipe(Effect.as(toResolution(row)))
      }))

  /** Posts `amount` (≤ reserved) and releases the rest; None when the hold was not pending. */
  const settle = tracedFn("Ledger.settle", Effect.fnUntraced(function*(holdId: string, amount: number) {
    yield* Effect.annotateCurrentSpan({ holdId, charge: amount })
    if (!Number.isInteger(amount) || amount < 0) return yield* Effect.die(new Error(`Invalid settle amount ${amount}`))
    return yield* resolved("settled", repo.settleHold({ holdId, charge: amount }))
  }))

  /** Releases all of a pending hold; None when it was not pending. */
  const refund = tracedFn("Ledger.refund", Effect.fnUntraced(function*(holdId: string) {
    yield* Effect.annotateCurrentSpan({ holdId, charge: 0 })
    return yield* resolved("refunded", repo.refundHold(holdId))
  }))

  /** Voids holds left pending past their timeout (a crashed request); returns how many. */
  const voidExpiredHolds = Effect.gen(function*() {
    let voided = 0
    for (const id of yield* repo.expiredHoldIds(sweepBatch)) {
      const done = yield* resolved("voided", repo.voidHold(id))
      if (Option.isSome(done)) voided++
    }
    if (voided > 0) yield* Effect.logWarning("voided expired holds").pipe(Effect.annotateLogs({ voided }))
    return voided
  }).pipe(Effect.withSpan("Ledger.voidExpiredHolds"))

  return { settle, refund, voidExpiredHolds }
}

const make: Effect.Effect<LedgerService, Config.ConfigError, LedgerRepo> = Effect.gen(function*() {
  const repo = yield* LedgerRepo
  const config = yield* LedgerConfig
  const periods = periodOperations(repo)
  return {
    ...periods,
    ...debitOperations(repo, config),
    ...resolveOperations(repo),
    ...grantOperations(repo, periods.wallet),
    config
  } as const
})

/** What the Ledger offers: the only moves of credits, and the reads that apply what is due first. */
export interface LedgerService {
  /** Monthly periods that ended, for every wallet (null) or one; how many rolled over. */
  readonly rollover: (accountId: string | null) => Effect.Effect<number>
  /** The wallet, after any rollover and top-up grant expiry that is due. */
  readonly wallet: (accountId: string) => Effect.Effect<WalletState>
  /** A plan change: a new monthly period from now with `monthlyGrant`. */
  readonly startNewPeriod: (accountId: string, monthlyGrant: number) => Effect.Effect<void>
  /** Takes `amount` into a pending hold: monthly first, then top-up grants soonest-expiring first. */
  readonly reserve: (accountId: string, amount: number, options: ReserveOptions) => Effect.Effect<Hold, InsufficientCredits | SpendLimitReached>
  /** Takes a fixed `amount` at once, with no hold. */
  readonly charge: (accountId: string, amount: number, options: ReserveOptions) => Effect.Effect<Balances, InsufficientCredits | SpendLimitReached>
  /** Posts `amount` (≤ reserved) and releases the rest; None when the hold was not pending. */
  readonly settle: (holdId: string, amount: number) => Effect.Effect<Option.Option<Resolution>>
  /** Releases all of a pending hold; None when it was not pending. */
  readonly refund: (holdId: string) => Effect.Effect<Option.Option<Resolution>>
  /** Voids holds left pending past HOLD_TIMEOUT; how many. */
  readonly voidExpiredHolds: Effect.Effect<number>
  /** An admin or billing grant to one bucket (a top-up grant may expire); answers the wallet. */
  readonly grant: (accountId: string, bucket: Bucket, amount: number, details: GrantDetails) => Effect.Effect<WalletState, ValidationFailed>
  /** Opens a new account's wallet with its starting balances. */
  readonly openWallet: (
    accountId: string,
    opening: { readonly monthlyGrant: number; readonly monthlyBalance: number; readonly topupBalance: number }
  ) => Effect.Effect<void, ValidationFailed>
  /** Expires the top-up grants that are due (a batch of wallets); how many expired. */
  readonly expireDueGrants: Effect.Effect<number>
  /** Up to `limit` live top-up grants in spending order; `more`: there are others. */
  readonly topupGrants: (accountId: string, limit: number) => Effect.Effect<{ readonly grants: ReadonlyArray<TopupGrant>; readonly more: boolean }>
  readonly config: LedgerSettings
}

export class Ledger extends Context.Service<Ledger, LedgerService>()("hookline/Ledger") {
  /** Takes its LedgerRepo from the caller (the in-memory one, RepoMemory.ts, in a test). */
  static readonly layerWithoutDependencies = Layer.effect(Ledger, make)
  static readonly layer = Ledger.layerWithoutDependencies.pipe(Layer.provide(LedgerRepo.layer))
}
