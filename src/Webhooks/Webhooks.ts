/**
 * Account webhooks: the URL and signing secret of each account (decisions.md, "Webhooks"),
 * the test send, and the outbox other rooms write events into (`enqueueEvent`). Deliveries are
 * made by the dispatcher (Dispatcher.ts).
 *
 * Secrets are stored encrypted (SecretBox.ts). A rotation keeps the previous secret for
 * WEBHOOK_PREVIOUS_SECRET_TTL (24 hours); only the most recent previous secret is kept.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Either, Option, Redacted, Schema } from "effect"
import { Secrets } from "../Config.js"
import { ValidationFailed } from "../Errors.js"
import { newId } from "../Ids.js"
import type { Prediction } from "../Predictions/Api.js"
import { DatabaseMode, orDieOnDb } from "../Sql.js"
import { EventType, type Webhook, type WebhookSecret, type WebhookTest } from "./Api.js"
import { WebhookConfig } from "./Config.js"
import { makeSecretBox, type SecretUnreadable } from "./SecretBox.js"
import { eventBody, generateSecret } from "./Signing.js"
import { attempt, attemptAt, type AttemptRules } from "./Transport.js"
import { resolveTarget } from "./UrlPolicy.js"

export type { EventType } from "./Api.js"
/** The events other rooms write into the outbox (wallet events come from the database's triggers). */
export type PredictionEventType = "prediction.succeeded" | "prediction.failed"

/** Channel the outbox notifies on commit (Postgres only; embedded mode polls). */
export const deliveriesChannel = "hookline_webhook_deliveries"

/** The webhook as its API resource shows it. */
const WebhookState = Schema.Struct({
  url: Schema.String,
  enabled: Schema.Boolean,
  /** Null: all event types. */
  events: Schema.NullOr(Schema.Array(EventType)),
  disabled_reason: Schema.NullOr(Schema.Literal("gone", "failing")),
  disabled_at: Schema.NullOr(Schema.DateFromSelf)
})
type WebhookState = typeof WebhookState.Type

const webhookOf = (row: WebhookState): Webhook => ({
  object: "webhook",
  url: row.url,
  configured: row.enabled,
  events: row.events === null ? ["*"] : row.events,
  disabled_reason: row.disabled_reason,
  disabled_at: row.disabled_at === null ? null : row.disabled_at.toISOString()
})

/** The WebhookSecret answer: the webhook, with the secret when one was just issued. */
const withSecret = (webhook: Webhook, secret?: string): WebhookSecret => (secret === undefined ? webhook : { ...webhook, secret })

/** The stored selection: null for all ("*" anywhere), else the distinct types. */
const storedEvents = (events: ReadonlyArray<EventType | "*">): Array<EventType> | null =>
  events.includes("*") ? null : [...new Set(events.filter((event): event is EventType => event !== "*"))]

const WebhookRow = Schema.Struct({
  ...WebhookState.fields,
  secret_ciphertext: Schema.String,
  /** Null once the rotation window has passed. */
  previous_secret_ciphertext: Schema.NullOr(Schema.String)
})

const notConfigured = new ValidationFailed({ message: "No webhook is configured; set one with PUT /v1/webhooks first." })

/** A made-up prediction for the test send; its ids are fresh, so receivers can tell it apart. */
const syntheticPrediction = (now: Date): Prediction => ({
  object: "prediction",
  id: newId("pred"),
  status: "succeeded",
  created_at: new Date(now.getTime() - 30_000).toISOString(),
  completed_at: now.toISOString(),
  input: { duration_sec: 12.4 },
  result: { band: "high", hook_duration_sec: 1.6, category: null },
  error: null
})

export class Webhooks extends Effect.Service<Webhooks>()("hookline/Webhooks", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const mode = yield* DatabaseMode
    const config = yield* WebhookConfig
    const secrets = yield* Secrets
    const box = makeSecretBox(Redacted.value(secrets.webhookSecretKey))
    const stateColumns = sql`url, enabled, events, disabled_reason, disabled_at`
    const rules: AttemptRules = {
      allowInsecure: config.allowInsecure,
      allowPrivate: config.allowPrivate,
      timeout: config.timeout,
      resolveTimeout: config.resolveTimeout
    }

    /** The signing secrets of a webhook row: the current one first, then the previous one if still valid. */
    const openSecrets = (
      accountId: string,
      current: string,
      previous: string | null
    ): Either.Either<ReadonlyArray<string>, SecretUnreadable> =>
      Either.all(
        previous === null
          ? [box.open(current, accountId)]
          : [box.open(current, accountId), box.open(previous, accountId)]
      )

    const findRow = (accountId: string) =>
      sql`
        SELECT ${stateColumns}, secret_ciphertext,
               CASE WHEN previous_secret_expires_at > now() THEN previous_secret_ciphertext END AS previous_secret_ciphertext
          FROM webhooks WHERE account_id = ${accountId}`.pipe(
        Effect.flatMap((rows) =>
          rows.length === 0 ? Effect.succeed(Option.none()) : Effect.map(Schema.decodeUnknown(WebhookRow)(rows[0]), Option.some)
        ),
        orDieOnDb
      )

    /** Checks a URL under this server's settings; `explain` turns the refusal into the 422 message. */
    const checkUrl = (url: string, explain: (refusal: string) => string) =>
      resolveTarget(url, rules, config.resolveTimeout).pipe(
        Effect.mapError((refused) => new ValidationFailed({ message: explain(refused.message) }))
      )

    /** The PUT's field error. */
    const urlField = (refusal: string) => `url: ${refusal}`

    /** The stored URL may have been accepted under other settings than this server's. */
    const configuredUrl = (url: string) => (refusal: string) =>
      `The configured webhook URL ${url} is refused by this server: ` +
      `${refusal.startsWith("must") ? `it ${refusal}` : refusal}. Set another with PUT /v1/webhooks.`

    const get = (accountId: string) =>
      Effect.map(findRow(accountId), Option.match({
        onNone: (): Webhook => ({ object: "webhook", url: null, configured: false, events: ["*"], disabled_reason: null, disabled_at: null }),
        onSome: webhookOf
      }))

    const decodeState = (rows: ReadonlyArray<unknown>) =>
      Effect.map(Schema.decodeUnknown(Schema.Array(WebhookState))(rows), (states) => states.map(webhookOf))

    /**
     * Sets the URL and enables the webhook (clearing a health disable); `events` replaces the
     * selection when given. The secret is issued only when the webhook is created.
     */
    const set = (accountId: string, url: string, events?: ReadonlyArray<EventType | "*">) =>
      Effect.gen(function*() {
        yield* checkUrl(url, urlField)
        const secret = generateSecret()
        const selection = events === undefined ? null : storedEvents(events)
        const created = yield* sql`
          INSERT INTO webhooks (account_id, url, enabled, secret_ciphertext, events)
          VALUES (${accountId}, ${url}, true, ${box.seal(secret, accountId)}, ${selection})
          ON CONFLICT (account_id) DO NOTHING
          RETURNING ${stateColumns}`.pipe(Effect.flatMap(decodeState), orDieOnDb)
        if (created.length > 0) return withSecret(created[0], secret)
        const updated = yield* sql`
          UPDATE webhooks
             SET url = ${url}, enabled = true, failing_since = NULL, disabled_reason = NULL, disabled_at = NULL,
                 ${events === undefined ? sql`` : sql`events = ${selection},`} updated_at = now()
           WHERE account_id = ${accountId}
          RETURNING ${stateColumns}`.pipe(Effect.flatMap(decodeState), orDieOnDb)
        return withSecret(updated[0])
      })

    /** DELETE: configured becomes false; url and secret are kept. Without a webhook, nothing changes. */
    const disable = (accountId: string) =>
      Effect.gen(function*() {
        yield* sql`
          UPDATE webhooks SET enabled = false, disabled_reason = NULL, disabled_at = NULL, updated_at = now()
           WHERE account_id = ${accountId}`.pipe(orDieOnDb)
        return yield* get(accountId)
      })

    /** A new secret, shown once; the current one stays valid for the rotation window. */
    const rotate = (accountId: string) =>
      Effect.gen(function*() {
        const secret = generateSecret()
        const ttlMs = Duration.toMillis(config.previousSecretTtl)
        const rows = yield* sql`
          UPDATE webhooks
             SET previous_secret_ciphertext = secret_ciphertext,
                 previous_secret_expires_at = now() + ${ttlMs}::float8 * interval '1 millisecond',
                 secret_ciphertext = ${box.seal(secret, accountId)},
                 updated_at = now()
           WHERE account_id = ${accountId}
          RETURNING ${stateColumns}`.pipe(Effect.flatMap(decodeState), orDieOnDb)
        if (rows.length === 0) return yield* notConfigured
        return withSecret(rows[0], secret)
      })

    /**
     * One synchronous, signed attempt of a synthetic prediction.succeeded event; nothing is stored.
     * The URL is checked again first: one that now breaks a rule (resolves to a private address)
     * is 422 naming the rule, while a host that no longer resolves is what a real delivery would
     * meet too, an attempt without an HTTP answer (delivered false, status_code null).
     */
    const sendTest = (accountId: string) =>
      Effect.gen(function*() {
        const row = yield* findRow(accountId)
        if (Option.isNone(row) || !row.value.enabled) return yield* notConfigured
        const target = yield* resolveTarget(row.value.url, rules, config.resolveTimeout).pipe(
          Effect.map(Option.some),
          Effect.catchIf((refused) => refused.unresolved === true, () => Effect.succeedNone),
          Effect.mapError((refused) => new ValidationFailed({ message: configuredUrl(row.value.url)(refused.message) }))
        )
        const signingSecrets = yield* Either.match(
          openSecrets(accountId, row.value.secret_ciphertext, row.value.previous_secret_ciphertext),
          { onLeft: (unreadable) => Effect.dieMessage(`webhook secret of ${accountId}: ${unreadable.message}`), onRight: Effect.succeed }
        )
        const now = new Date()
        const eventId = newId("evt")
        const body = eventBody({ id: eventId, type: "prediction.succeeded", createdAt: now.toISOString(), data: syntheticPrediction(now) })
        const input = { url: row.value.url, secrets: signingSecrets, eventId, body }
        const outcome = yield* Option.match(target, { onSome: (checked) => attemptAt(checked, input, rules), onNone: () => attempt(input, rules) })
        yield* Effect.annotateLogs(Effect.logInfo("webhook test sent"), {
          account_id: accountId,
          delivered: outcome.delivered,
          status_code: outcome.statusCode ?? "none"
        })
        return {
          object: "webhook_test",
          delivered: outcome.delivered,
          status_code: outcome.statusCode,
          event: "prediction.succeeded"
        } satisfies WebhookTest
      })

    /** Plan loss disables the account webhook; url and secret are kept. Joins the caller's transaction. */
    const disableForAccount = (accountId: string) =>
      sql`UPDATE webhooks SET enabled = false, updated_at = now() WHERE account_id = ${accountId}`.pipe(
        Effect.asVoid,
        orDieOnDb
      )

    /**
     * The outbox: records an event for delivery to the account's webhook, when one is enabled.
     * Call it inside the transaction of the state change that causes the event, so both commit
     * or neither does. Returns the delivery id, or null when the account has no enabled webhook.
     */
    const enqueueEvent = (accountId: string, type: PredictionEventType, data: Prediction) =>
      Effect.gen(function*() {
        const eventId = newId("evt")
        const deliveryId = newId("dlv")
        const body = eventBody({ id: eventId, type, createdAt: new Date().toISOString(), data })
        const rows = yield* sql`
          INSERT INTO webhook_deliveries (id, event_id, account_id, event_type, payload, body)
          SELECT ${deliveryId}, ${eventId}, ${accountId}, ${type}, ${body}::jsonb, ${body}
            FROM webhooks WHERE account_id = ${accountId} AND enabled AND (events IS NULL OR ${type} = ANY (events))
          RETURNING id`
        if (rows.length === 0) return null
        // Sent when the caller's transaction commits; wakes the dispatchers at once.
        if (!mode.embedded) yield* sql`SELECT pg_notify(${deliveriesChannel}, ${deliveryId})`
        return deliveryId
      }).pipe(orDieOnDb)

    return { config, rules, openSecrets, get, set, disable, rotate, sendTest, disableForAccount, enqueueEvent } as const
  }),
  dependencies: [Secrets.Live]
}) {}
