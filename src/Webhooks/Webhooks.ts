/**
 * Account webhooks: the URL and signing secret of each account (docs/behaviour.md, "Webhooks"),
 * the test send, and the outbox other rooms write events into (`enqueueEvent`). Deliveries are
 * made by the dispatcher (Dispatcher.ts).
 *
 * Secrets are stored encrypted (SecretBox.ts). A rotation keeps the previous secret for
 * WEBHOOK_PREVIOUS_SECRET_TTL (24 hours); only the most recent previous secret is kept.
 */
import { Context, Duration, Effect, Layer, Option, Redacted, Result } from "effect"
import { Secrets } from "../Config.js"
import { ValidationFailed } from "../Errors.js"
import { newId } from "../Ids.js"
import { tracedFn } from "../Observability/Tracing.js"
import { currentDate } from "../Repository.js"
import { DatabaseMode } from "../Sql.js"
import type { EventType, Webhook, WebhookSecret, WebhookTest } from "./Api.js"
import { WebhookConfig } from "./Config.js"
import { WebhooksRepo } from "./Repo.js"
import type { WebhookState } from "./Rows.js"
import { makeSecretBox } from "./SecretBox.js"
import { WebhookSender } from "./Sender.js"
import { eventBody, generateSecret } from "./Signing.js"
import { type AttemptRules, attemptRules, WebhookTransport } from "./Transport.js"
import { resolveTarget } from "./UrlPolicy.js"

export type { EventType } from "./Api.js"
/** The events other rooms write into the outbox (wallet events come from the database's triggers). */
export type PredictionEventType = "prediction.succeeded" | "prediction.failed"

/**
 * An event's data: the API object the event is about, as the API renders it. The room that
 * raises the event owns the object's schema; the test send's sample is checked against it by a test.
 */
export interface EventData {
  readonly object: string
  readonly id: string
}

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

const notConfigured = new ValidationFailed({ message: "No webhook is configured; set one with PUT /v1/webhooks first." })

/** A made-up prediction for the test send; its ids are fresh, so receivers can tell it apart. */
const syntheticPrediction = (now: Date) => ({
  object: "prediction",
  id: newId("pred"),
  status: "succeeded",
  created_at: new Date(now.getTime() - 30_000).toISOString(),
  completed_at: now.toISOString(),
  input: { duration_sec: 12.4 },
  result: {
    band: "high",
    hook_duration_sec: 1.6,
    category: { slug: "food-cooking" },
    hook_text: "Stop scrolling if you hate meal prep",
    hook_text_confidence: 0.94,
    similar_hooks: []
  },
  error: null
})

/** The PUT's field error. */
const urlField = (refusal: string) => `url: ${refusal}`

/** The stored URL may have been accepted under other settings than this server's. */
const configuredUrl = (url: string) => (refusal: string) =>
  `The configured webhook URL ${url} is refused by this server: ` +
  `${refusal.startsWith("must") ? `it ${refusal}` : refusal}. Set another with PUT /v1/webhooks.`

/** The account webhook: its settings, its secret, the test send, and the outbox other rooms write into. */
export interface WebhooksService {
  /** The account's webhook; one that was never set reads as not configured (url null). */
  readonly get: (accountId: string) => Effect.Effect<Webhook>
  /**
   * Sets the URL and enables the webhook (clearing a health disable); `events` replaces the
   * selection when given. The secret is issued, and shown, only when the webhook is created.
   * ValidationFailed when the URL breaks a rule of the URL policy.
   */
  readonly set: (accountId: string, url: string, events?: ReadonlyArray<EventType | "*">) => Effect.Effect<WebhookSecret, ValidationFailed>
  /** DELETE: configured becomes false; url and secret are kept. Without a webhook, nothing changes. */
  readonly disable: (accountId: string) => Effect.Effect<Webhook>
  /**
   * A new secret, shown once; the current one stays valid for WEBHOOK_PREVIOUS_SECRET_TTL.
   * ValidationFailed when no webhook is configured.
   */
  readonly rotate: (accountId: string) => Effect.Effect<WebhookSecret, ValidationFailed>
  /**
   * One synchronous, signed attempt of a made-up prediction.succeeded event; nothing is stored.
   * ValidationFailed when no webhook is enabled or its URL now breaks a rule.
   */
  readonly sendTest: (accountId: string) => Effect.Effect<WebhookTest, ValidationFailed>
  /** Plan loss disables the account webhook; url and secret are kept. Joins the caller's transaction. */
  readonly disableForAccount: (accountId: string) => Effect.Effect<void>
  /**
   * The outbox: records an event for delivery to the account's webhook, when one is enabled.
   * Call it inside the transaction of the state change that causes the event, so both commit
   * or neither does. The delivery id, or null when the account has no enabled webhook.
   */
  readonly enqueueEvent: (accountId: string, type: PredictionEventType, data: EventData) => Effect.Effect<string | null>
}

/** What the test send needs from the service. */
interface TestSendDeps {
  readonly repo: WebhooksRepo["Service"]
  readonly sender: WebhookSender["Service"]
  readonly rules: AttemptRules
}

/**
 * The test send: one synchronous, signed attempt of a synthetic prediction.succeeded event;
 * nothing is stored. The URL is checked again first: one that now breaks a rule (resolves to a
 * private address) is 422 naming the rule, while a host that no longer resolves is what a real
 * delivery would meet too, an attempt without an HTTP answer (delivered false, status_code null).
 */
const makeTestSend = ({ repo, rules, sender }: TestSendDeps) =>
  tracedFn("Webhooks.sendTest", Effect.fnUntraced(function*(accountId: string) {
    const row = yield* repo.findWebhook(accountId)
    if (Option.isNone(row) || !row.value.enabled) return yield* notConfigured
    const target = yield* resolveTarget(row.value.url, rules, rules.resolveTimeout).pipe(
      Effect.map(Option.some),
      Effect.catchIf((refused) => refused.unresolved === true, () => Effect.succeedNone),
      Effect.mapError((refused) => new ValidationFailed({ message: configuredUrl(row.value.url)(refused.message) }))
    )
    const signingSecrets = yield* Result.match(
      sender.openSecrets(accountId, row.value.secret_ciphertext, row.value.previous_secret_ciphertext),
      {
        onFailure: (unreadable) => Effect.die(new Error(`webhook secret of ${accountId}: ${unreadable.message}`)),
        onSuccess: Effect.succeed
      }
    )
    const now = yield* currentDate
    const eventId = newId("evt")
    const body = eventBody({ id: eventId, type: "prediction.succeeded", createdAt: now.toISOString(), data: syntheticPrediction(now) })
    const input = { url: row.value.url, secrets: signingSecrets, eventId, body, test: true }
    const outcome = yield* Option.match(target, {
      onSome: (checked) => sender.attemptAt(checked, input),
      onNone: () => sender.attempt(input)
    })
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
  }))

/** A warning at start for each development setting that loosens the URL rules while it is on. */
const warnDevelopmentSettings = (config: WebhookConfig) =>
  Effect.gen(function*() {
    if (config.allowInsecure) {
      yield* Effect.logWarning("WEBHOOK_ALLOW_INSECURE is on: webhook URLs may use plain http:// (meant for local development only)")
    }
    if (config.allowPrivate) {
      yield* Effect.logWarning("WEBHOOK_ALLOW_PRIVATE is on: webhooks may be sent to private and loopback addresses (meant for local development only)")
    }
  })

const make = Effect.gen(function*() {
  const repo = yield* WebhooksRepo
  const sender = yield* WebhookSender
  const mode = yield* DatabaseMode
  const config = yield* WebhookConfig
  yield* warnDevelopmentSettings(config)
  const secrets = yield* Secrets
  const box = makeSecretBox(Redacted.value(secrets.webhookSecretKey))
  const rules = attemptRules(config)
  const sendTest = makeTestSend({ repo, sender, rules })

  const get = tracedFn("Webhooks.get", Effect.fnUntraced(function*(accountId: string) {
    return Option.match(yield* repo.findWebhook(accountId), {
      onNone: (): Webhook => ({ object: "webhook", url: null, configured: false, events: ["*"], disabled_reason: null, disabled_at: null }),
      onSome: webhookOf
    })
  }))

  /**
   * Sets the URL and enables the webhook (clearing a health disable); `events` replaces the
   * selection when given. The secret is issued only when the webhook is created.
   */
  const set = tracedFn("Webhooks.set", Effect.fnUntraced(function*(accountId: string, url: string, events?: ReadonlyArray<EventType | "*">) {
    yield* resolveTarget(url, rules, rules.resolveTimeout).pipe(
      Effect.mapError((refused) => new ValidationFailed({ message: urlField(refused.message) }))
    )
    const secret = generateSecret()
    const selection = events === undefined ? null : storedEvents(events)
    const created = yield* repo.createWebhook({ accountId, url, secretCiphertext: box.seal(secret, accountId), events: selection })
    if (Option.isSome(created)) return withSecret(webhookOf(created.value), secret)
    const updated = yield* repo.retargetWebhook({ accountId, url, events: events === undefined ? undefined : selection })
    return withSecret(webhookOf(updated))
  }))

  /** DELETE: configured becomes false; url and secret are kept. Without a webhook, nothing changes. */
  const disable = tracedFn("Webhooks.disable", Effect.fnUntraced(function*(accountId: string) {
    yield* repo.switchOffWebhook(accountId)
    return yield* get(accountId)
  }))

  /** A new secret, shown once; the current one stays valid for the rotation window. */
  const rotate = tracedFn("Webhooks.rotate", Effect.fnUntraced(function*(accountId: string) {
    const secret = generateSecret()
    const rotated = yield* repo.rotateSecret({
      accountId,
      secretCiphertext: box.seal(secret, accountId),
      previousTtlMs: Duration.toMillis(config.previousSecretTtl)
    })
    if (Option.isNone(rotated)) return yield* notConfigured
    return withSecret(webhookOf(rotated.value), secret)
  }))

  /** Plan loss disables the account webhook; url and secret are kept. Joins the caller's transaction. */
  const disableForAccount = tracedFn("Webhooks.disableForAccount", (accountId: string) => repo.disableForPlanLoss(accountId))

  /**
   * The outbox: records an event for delivery to the account's webhook, when one is enabled.
   * Call it inside the transaction of the state change that causes the event, so both commit
   * or neither does. Returns the delivery id, or null when the account has no enabled webhook.
   */
  const enqueueEvent = tracedFn("Webhooks.enqueueEvent", Effect.fnUntraced(
    function*(accountId: string, type: PredictionEventType, data: EventData) {
      const now = yield* currentDate
      const eventId = newId("evt")
      const body = eventBody({ id: eventId, type, createdAt: now.toISOString(), data })
      const queued = yield* repo.enqueueDelivery({ deliveryId: newId("dlv"), eventId, accountId, type, body, now })
      if (Option.isNone(queued)) return null
      // Sent when the caller's transaction commits; wakes the dispatchers at once.
      if (!mode.embedded) yield* repo.notifyDispatchers(queued.value.id)
      return queued.value.id
    }
  ))

  return Webhooks.of({ get, set, disable, rotate, sendTest, disableForAccount, enqueueEvent })
})

export class Webhooks extends Context.Service<Webhooks, WebhooksService>()("hookline/Webhooks") {
  /**
   * Needs the repository, the transport and the secrets from outside (tests bring a fake
   * transport); provides the WebhookSender it sends with too, for the Dispatcher.
   */
  static readonly layerWithoutDependencies = Layer.effect(Webhooks, make).pipe(Layer.provideMerge(WebhookSender.layerWithoutDependencies))
  static readonly layer = Webhooks.layerWithoutDependencies.pipe(
    Layer.provide([Secrets.layer, WebhooksRepo.layer, WebhookTransport.layer])
  )
}
