/**
 * The webhook dispatcher: a background fiber that delivers the outbox (`webhook_deliveries`).
 * Its statements are WebhooksRepo's; "now" is Effect's Clock (TestClock in tests).
 *
 * - Claiming: one statement picks due deliveries with `FOR UPDATE SKIP LOCKED`, counts the
 *   attempt, and leases them (next_attempt_at = now + lease, claim_token = this claim), so
 *   several dispatchers in several processes never take the same delivery at once, and no
 *   transaction stays open while the receiver is called.
 * - Attempt: outside any transaction (Transport.ts), with the URL policy checked again.
 * - Outcome: one statement writes the attempt row and the delivery's next state, guarded by the
 *   claim token: any 2xx → delivered; otherwise the next attempt per WEBHOOK_RETRY_SCHEDULE,
 *   or failed after the last one. A dispatcher that dies mid-attempt leaves the lease to run
 *   out, and another (or the restarted one) picks the delivery up; one that shuts down cleanly
 *   releases its claims at once.
 * - Endpoint health, in the same statement: an answer of 410 Gone fails the delivery and
 *   disables the webhook at once ("gone"); a failed attempt while every attempt has failed for
 *   WEBHOOK_DISABLE_AFTER disables it ("failing"); a delivery clears the failing streak. A 429
 *   or 503 with Retry-After sets the next wait, kept within the schedule's shortest and longest.
 * - A delivery that comes due while its webhook is disabled is not sent: it is marked failed
 *   ("webhook disabled") and not retried, so re-enabling a webhook does not replay old events.
 * - Wake-up: LISTEN on the outbox channel (Postgres), a timer for the next due retry, and a
 *   poll every WEBHOOK_POLL_INTERVAL (the only source in embedded mode, which has no LISTEN).
 */
import type { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, FiberSet, Layer, Queue, Ref, Result, type Scope } from "effect"
import { randomUUID } from "node:crypto"
import { currentDate } from "../Repository.js"
import { DatabaseMode, listenForever, logBackgroundFailure } from "../Sql.js"
import { effectiveLease, WebhookConfig } from "./Config.js"
import type { DeliveryStatus } from "./Api.js"
import { deliveriesChannel, WebhooksRepo } from "./Repo.js"
import type { ClaimedRow } from "./Rows.js"
import type { AttemptOutcome } from "./Transport.js"
import { WebhookSender } from "./Sender.js"

/** Shortest wait between two looks at the outbox, so rows another process is claiming do not make a loop spin. */
const minimumWait = Duration.millis(10)

/** A delivery's state after attempt number `attempts`: 2xx delivered, 410 or the schedule's end failed, else pending. */
const stateAfter = (attempts: number, outcome: AttemptOutcome, schedule: ReadonlyArray<Duration.Duration>): DeliveryStatus =>
  outcome.delivered ? "delivered" : outcome.statusCode === 410 || attempts > schedule.length ? "failed" : "pending"

/** The wait before the next attempt: the schedule's, or the receiver's Retry-After within the schedule's bounds. */
const nextDelayMs = (attempts: number, outcome: AttemptOutcome, scheduleMs: ReadonlyArray<number>) =>
  outcome.retryAfterMs === null
    ? scheduleMs[attempts - 1]
    : Math.min(Math.max(outcome.retryAfterMs, Math.min(...scheduleMs)), Math.max(...scheduleMs))

/** One claimed delivery's attempt and its record, under this dispatcher's name. */
const makeDelivery = (repo: WebhooksRepo["Service"], sender: WebhookSender["Service"], config: WebhookConfig, dispatcherId: string) => {
  const scheduleMs = config.retrySchedule.map(Duration.toMillis)
  const disableAfterMs = Duration.toMillis(config.disableAfter)

  /** Writes the attempt and the delivery's next state; returns that state. */
  const record = (row: ClaimedRow, token: string, outcome: AttemptOutcome) =>
    Effect.gen(function*() {
      const status = stateAfter(row.attempts, outcome, config.retrySchedule)
      yield* repo.recordAttempt({
        deliveryId: row.id,
        accountId: row.account_id,
        token,
        attempt: row.attempts,
        dispatcher: dispatcherId,
        statusCode: outcome.statusCode,
        durationMs: outcome.durationMs,
        error: outcome.error,
        status,
        delayMs: status === "pending" ? nextDelayMs(row.attempts, outcome, scheduleMs) : 0,
        delivered: outcome.delivered,
        gone: outcome.statusCode === 410,
        disableAfterMs,
        now: yield* currentDate
      })
      return status
    })

  /** A clean shutdown hands an unfinished attempt back at once (it does not count). */
  const release = (row: ClaimedRow, token: string) =>
    Effect.flatMap(currentDate, (now) => repo.releaseClaim({ deliveryId: row.id, token, now })).pipe(
      Effect.timeout(Duration.seconds(2)),
      Effect.catchCause((cause) => Effect.logWarning("webhook claim not released", cause))
    )

  /** The attempt itself: unsigned (and not sent) when the secret does not open. */
  const attempt = (row: ClaimedRow & { readonly url: string; readonly secret_ciphertext: string }) =>
    Result.match(sender.openSecrets(row.account_id, row.secret_ciphertext, row.previous_secret_ciphertext), {
      onFailure: (unreadable) =>
        Effect.as(Effect.logError("webhook secret unreadable", unreadable.message), {
          delivered: false,
          statusCode: null,
          durationMs: 0,
          error: `not signed: ${unreadable.message}`,
          retryAfterMs: null
        } satisfies AttemptOutcome),
      onSuccess: (secrets) => sender.attempt({ url: row.url, secrets, eventId: row.event_id, body: row.body })
    })

  /** Attempts one claimed delivery and records the outcome; never fails. */
  return (row: ClaimedRow, token: string) =>
    Effect.gen(function*() {
      const { url, secret_ciphertext } = row
      if (url === null || row.enabled !== true || secret_ciphertext === null) {
        return yield* Effect.flatMap(currentDate, (now) => repo.dropForDisabledWebhook({ deliveryId: row.id, token, now }))
      }
      const outcome = yield* attempt({ ...row, url, secret_ciphertext })
      const status = yield* record(row, token, outcome)
      yield* Effect.logDebug("webhook attempt").pipe(
        Effect.annotateLogs({
          delivery_id: row.id,
          event_id: row.event_id,
          attempt: row.attempts,
          status_code: outcome.statusCode ?? "none",
          outcome: status
        })
      )
    }).pipe(
      Effect.onInterrupt(() => release(row, token)),
      Effect.catchCause((cause) => Effect.logError("webhook delivery failed to record", cause)),
      Effect.withSpan("Webhooks.deliver", { attributes: { delivery_id: row.id, attempt: row.attempts } })
    )
}

interface Outbox {
  readonly config: WebhookConfig
  readonly claim: (limit: number, token: string) => Effect.Effect<ReadonlyArray<ClaimedRow>>
  readonly deliver: (row: ClaimedRow, token: string) => Effect.Effect<void>
  readonly untilNextDue: Effect.Effect<Duration.Duration>
}

/**
 * The background loop: keeps up to the concurrency of deliveries in flight; LISTEN (Postgres),
 * the end of an attempt, the next due retry and the poll interval wake it.
 */
const makeLoop = ({ claim, config, deliver, untilNextDue }: Outbox, embedded: boolean) =>
  Effect.gen(function*() {
    const doorbell = yield* Queue.sliding<void>(1)
    const ring = Queue.offer(doorbell, undefined)
    const waitForBell = (timeout: Duration.Duration) => Queue.take(doorbell).pipe(Effect.timeout(timeout), Effect.ignore)
    const inFlight = yield* Ref.make(0)
    const running = yield* FiberSet.make()

    /** Claims what is due into the free slots and starts the attempts, then waits for a reason to look again. */
    const round = Effect.gen(function*() {
      const free = config.concurrency - (yield* Ref.get(inFlight))
      if (free <= 0) return yield* waitForBell(config.pollInterval)
      const token = randomUUID()
      const claimed = yield* claim(free, token)
      yield* Ref.update(inFlight, (n) => n + claimed.length)
      for (const row of claimed) {
        yield* FiberSet.run(running, deliver(row, token).pipe(Effect.ensuring(Effect.andThen(Ref.update(inFlight, (n) => n - 1), ring))))
      }
      // A full claim means more may be due: look again straight away.
      if (claimed.length === free) return
      yield* waitForBell(yield* untilNextDue)
    })

    if (!embedded) {
      // Polling covers the time the LISTEN is lost; taken again, it rings once to catch up.
      yield* Effect.forkScoped(listenForever(deliveriesChannel, Effect.asVoid(ring)))
    }
    return yield* round.pipe(
      Effect.catchCause((cause) => logBackgroundFailure("webhook dispatch round failed")(cause).pipe(Effect.andThen(waitForBell(config.pollInterval)))),
      Effect.forever
    )
  })

/** The webhook dispatcher: its loop for a server process, and a step for tests. */
export interface DispatcherService {
  /** Names this process's dispatcher in the attempts it records. */
  readonly dispatcherId: string
  /** Attempts every delivery due now and waits for each outcome to be recorded; how many were attempted. */
  readonly deliverDue: Effect.Effect<number>
  /** The dispatcher's life in a server process: woken by new deliveries, else by the next one due (fork it in a scope). */
  readonly run: Effect.Effect<never, never, Scope.Scope | PgClient.PgClient>
}

const make = Effect.gen(function*() {
  const repo = yield* WebhooksRepo
  const mode = yield* DatabaseMode
  const sender = yield* WebhookSender
  const config = yield* WebhookConfig
  const leaseMs = Duration.toMillis(effectiveLease(config))
  /** Names this process's dispatcher in the attempts it records. */
  const dispatcherId = `dsp_${randomUUID().replaceAll("-", "")}`
  const outbox: Outbox = {
    config,
    claim: (limit, token) => Effect.flatMap(currentDate, (now) => repo.claimDueDeliveries({ limit, token, leaseMs, now })),
    deliver: makeDelivery(repo, sender, config, dispatcherId),
    untilNextDue: Effect.flatMap(currentDate, repo.untilNextDue).pipe(
      Effect.map(({ wait_ms }) =>
        wait_ms === null
          ? config.pollInterval
          : Duration.clamp(Duration.millis(wait_ms), { minimum: minimumWait, maximum: config.pollInterval })
      )
    )
  }

  /**
   * Attempts every delivery due now (by the Clock), up to the concurrency at a time, and
   * waits for each outcome to be recorded; returns how many were attempted. The background
   * loop does the same without waiting; tests call this to step the schedule.
   */
  const deliverDue = Effect.gen(function*() {
    let attempted = 0
    for (;;) {
      const token = randomUUID()
      const claimed = yield* outbox.claim(config.concurrency, token)
      yield* Effect.forEach(claimed, (row) => outbox.deliver(row, token), { concurrency: "unbounded", discard: true })
      attempted += claimed.length
      if (claimed.length < config.concurrency) return attempted
    }
  }).pipe(Effect.withSpan("Dispatcher.deliverDue"))

  /** The dispatcher's life in a server process (forked in the caller's scope). */
  const run = makeLoop(outbox, mode.embedded)

  return Dispatcher.of({ dispatcherId, deliverDue, run })
})

export class Dispatcher extends Context.Service<Dispatcher, DispatcherService>()("hookline/Dispatcher") {
  /** Needs WebhookSender and WebhooksRepo from outside (tests build the sender on a fake transport). */
  static readonly layerWithoutDependencies = Layer.effect(Dispatcher, make)
  static readonly layer = Dispatcher.layerWithoutDependencies.pipe(Layer.provide([WebhookSender.layer, WebhooksRepo.layer]))
}

/** The dispatcher running in the back yard of a server process; interrupted when the layer's scope closes. */
export const DispatcherLive = Layer.effectDiscard(Effect.flatMap(Dispatcher, (dispatcher) => Effect.forkScoped(dispatcher.run))).pipe(
  Layer.provide(Dispatcher.layer)
)
