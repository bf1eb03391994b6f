/**
 * The webhook dispatcher: a background fiber that delivers the outbox (`webhook_deliveries`).
 *
 * - Claiming: one statement picks due deliveries with `FOR UPDATE SKIP LOCKED`, counts the
 *   attempt, and leases them (next_attempt_at = now() + lease, claim_token = this claim), so
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
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Either, FiberSet, Layer, Queue, Ref, Schedule, Schema, Stream } from "effect"
import { randomUUID } from "node:crypto"
import { DatabaseMode, listen, orDieOnDb } from "../Sql.js"
import { effectiveLease } from "./Config.js"
import { attempt, type AttemptOutcome } from "./Transport.js"
import { deliveriesChannel, Webhooks } from "./Webhooks.js"

const ClaimedRow = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  account_id: Schema.String,
  /** This attempt's number (1 for the first). */
  attempts: Schema.Number,
  body: Schema.String,
  url: Schema.NullOr(Schema.String),
  enabled: Schema.NullOr(Schema.Boolean),
  secret_ciphertext: Schema.NullOr(Schema.String),
  previous_secret_ciphertext: Schema.NullOr(Schema.String)
})
type ClaimedRow = typeof ClaimedRow.Type

const NextDue = Schema.Array(Schema.Struct({ wait_ms: Schema.NullOr(Schema.Number) }))

/** Shortest wait between two looks at the outbox, so rows another process is claiming do not make a loop spin. */
const minimumWait = Duration.millis(10)

export const DispatcherLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const mode = yield* DatabaseMode
    const webhooks = yield* Webhooks
    const config = webhooks.config
    const leaseMs = Duration.toMillis(effectiveLease(config))
    const schedule = config.retrySchedule
    /** Names this process's dispatcher in the attempts it records. */
    const dispatcherId = `dsp_${randomUUID().replaceAll("-", "")}`

    const claim = (limit: number, token: string) =>
      sql`
        WITH due AS (
          SELECT id, account_id FROM webhook_deliveries
           WHERE status = 'pending' AND next_attempt_at <= now()
           ORDER BY next_attempt_at
           LIMIT ${limit}
           FOR UPDATE SKIP LOCKED
        )
        UPDATE webhook_deliveries d
           SET attempts = d.attempts + 1,
               next_attempt_at = now() + ${leaseMs}::float8 * interval '1 millisecond',
               claim_token = ${token}
          FROM due LEFT JOIN webhooks w ON w.account_id = due.account_id
         WHERE d.id = due.id
        RETURNING d.id, d.event_id, d.account_id, d.attempts, COALESCE(d.body, d.payload::text) AS body,
                  w.url, w.enabled, w.secret_ciphertext,
                  CASE WHEN w.previous_secret_expires_at > now() THEN w.previous_secret_ciphertext END
                    AS previous_secret_ciphertext`.pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(ClaimedRow))),
        orDieOnDb
      )

    /** Milliseconds until the next pending delivery is due (null: none pending). */
    const untilNextDue = sql`
      SELECT EXTRACT(EPOCH FROM min(next_attempt_at) - now()) * 1000 AS wait_ms
        FROM webhook_deliveries WHERE status = 'pending'`.pipe(
      Effect.flatMap(Schema.decodeUnknown(NextDue)),
      Effect.map((rows) => {
        const waitMs = rows[0]?.wait_ms ?? null
        if (waitMs === null) return config.pollInterval
        return Duration.clamp(Duration.millis(waitMs), { minimum: minimumWait, maximum: config.pollInterval })
      }),
      orDieOnDb
    )

    const scheduleMs = schedule.map(Duration.toMillis)
    const disableAfterMs = Duration.toMillis(config.disableAfter)

    /** The wait before the next attempt: the schedule's, or the receiver's Retry-After within the schedule's bounds. */
    const nextDelayMs = (attempts: number, outcome: AttemptOutcome) =>
      outcome.retryAfterMs === null
        ? scheduleMs[attempts - 1]
        : Math.min(Math.max(outcome.retryAfterMs, Math.min(...scheduleMs)), Math.max(...scheduleMs))

    const record = (row: ClaimedRow, token: string, outcome: AttemptOutcome) => {
      const gone = outcome.statusCode === 410
      const status = outcome.delivered ? "delivered" : gone || row.attempts > schedule.length ? "failed" : "pending"
      const delayMs = status === "pending" ? nextDelayMs(row.attempts, outcome) : 0
      const failingTooLong = sql`w.failing_since <= now() - ${disableAfterMs}::float8 * interval '1 millisecond'`
      const disabledReason = gone ? sql`'gone'` : sql`CASE WHEN ${failingTooLong} THEN 'failing' END`
      // Written only when something changes: a streak starts, ends, or disables the webhook.
      const health = outcome.delivered
        ? sql`UPDATE webhooks w SET failing_since = NULL
               WHERE w.account_id = ${row.account_id} AND w.failing_since IS NOT NULL AND EXISTS (SELECT 1 FROM claim)`
        : sql`UPDATE webhooks w
                 SET failing_since = COALESCE(w.failing_since, now()),
                     enabled = ${disabledReason} IS NULL,
                     disabled_reason = ${disabledReason},
                     disabled_at = CASE WHEN ${disabledReason} IS NULL THEN NULL ELSE now() END,
                     updated_at = now()
               WHERE w.account_id = ${row.account_id} AND w.enabled AND EXISTS (SELECT 1 FROM claim)
                 AND (w.failing_since IS NULL OR ${gone} OR ${failingTooLong})`
      return sql`
        WITH claim AS (
          SELECT 1 FROM webhook_deliveries WHERE id = ${row.id} AND claim_token = ${token}
        ),
        attempt AS (
          INSERT INTO webhook_attempts (delivery_id, attempt, dispatcher, status_code, duration_ms, error)
          VALUES (${row.id}, ${row.attempts}, ${dispatcherId}, ${outcome.statusCode}, ${Math.round(outcome.durationMs)}, ${outcome.error})
        ),
        health AS (${health})
        UPDATE webhook_deliveries
           SET status = ${status},
               next_attempt_at = now() + ${delayMs}::float8 * interval '1 millisecond',
               last_status_code = ${outcome.statusCode},
               last_error = ${outcome.error},
               completed_at = ${status === "pending" ? sql`NULL` : sql`now()`},
               claim_token = NULL
         WHERE id = ${row.id} AND claim_token = ${token}`.pipe(orDieOnDb, Effect.as(status))
    }

    /** The webhook is disabled (or gone): the event is not sent, and not retried. */
    const drop = (row: ClaimedRow, token: string) =>
      sql`
        UPDATE webhook_deliveries
           SET status = 'failed', attempts = attempts - 1, last_error = 'webhook disabled',
               completed_at = now(), claim_token = NULL
         WHERE id = ${row.id} AND claim_token = ${token}`.pipe(orDieOnDb)

    /** A clean shutdown hands an unfinished attempt back at once (it does not count). */
    const release = (row: ClaimedRow, token: string) =>
      sql`
        UPDATE webhook_deliveries
           SET attempts = attempts - 1, next_attempt_at = now(), claim_token = NULL
         WHERE id = ${row.id} AND claim_token = ${token}`.pipe(
        Effect.timeout(Duration.seconds(2)),
        Effect.catchAllCause((cause) => Effect.logWarning("webhook claim not released", cause))
      )

    const deliver = (row: ClaimedRow, token: string) =>
      Effect.gen(function*() {
        if (row.url === null || row.enabled !== true || row.secret_ciphertext === null) return yield* drop(row, token)
        const secrets = webhooks.openSecrets(row.account_id, row.secret_ciphertext, row.previous_secret_ciphertext)
        const outcome: AttemptOutcome = Either.isLeft(secrets)
          ? { delivered: false, statusCode: null, durationMs: 0, error: `not signed: ${secrets.left.message}`, retryAfterMs: null }
          : yield* attempt({ url: row.url, secrets: secrets.right, eventId: row.event_id, body: row.body }, webhooks.rules)
        if (Either.isLeft(secrets)) yield* Effect.logError("webhook secret unreadable", secrets.left.message)
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
        Effect.catchAllCause((cause) => Effect.logError("webhook delivery failed to record", cause)),
        Effect.withSpan("Webhooks.deliver", { attributes: { delivery_id: row.id, attempt: row.attempts } })
      )

    const doorbell = yield* Queue.sliding<void>(1)
    const ring = Queue.offer(doorbell, undefined)
    const waitForBell = (timeout: Duration.Duration) => Queue.take(doorbell).pipe(Effect.timeout(timeout), Effect.ignore)
    const inFlight = yield* Ref.make(0)
    const running = yield* FiberSet.make()

    const round = Effect.gen(function*() {
      const free = config.concurrency - (yield* Ref.get(inFlight))
      if (free <= 0) return yield* waitForBell(config.pollInterval)
      const token = randomUUID()
      const claimed = yield* claim(free, token)
      yield* Ref.update(inFlight, (n) => n + claimed.length)
      for (const row of claimed) {
        yield* FiberSet.run(running, deliver(row, token).pipe(Effect.ensuring(Effect.zipRight(Ref.update(inFlight, (n) => n - 1), ring))))
      }
      // A full claim means more may be due: look again straight away.
      if (claimed.length === free) return
      yield* waitForBell(yield* untilNextDue)
    })

    if (!mode.embedded) {
      yield* listen(deliveriesChannel).pipe(
        Stream.runForEach(() => ring),
        Effect.tapErrorCause((cause) => Effect.logWarning("webhook LISTEN lost; polling until it is back", cause)),
        Effect.retry(Schedule.spaced(config.pollInterval)),
        Effect.forkScoped
      )
    }

    yield* round.pipe(
      Effect.catchAllCause((cause) =>
        Effect.logError("webhook dispatch round failed", cause).pipe(Effect.zipRight(Effect.sleep(config.pollInterval)))
      ),
      Effect.forever,
      Effect.forkScoped
    )
  })
)
