/**
 * Signed attempts to an account's webhook: the stored signing secrets opened under the server's
 * WEBHOOK_SECRET_KEY, and one attempt through the transport under this server's URL rules.
 * The test send (Webhooks.ts) and the deliveries (Dispatcher.ts) both send through it.
 */
import { Context, Effect, Layer, Redacted, Result } from "effect"
import { Secrets } from "../Config.js"
import { WebhookConfig } from "./Config.js"
import { makeSecretBox, type SecretUnreadable } from "./SecretBox.js"
import { type AttemptInput, type AttemptOutcome, attemptRules, makeAttempts, WebhookTransport } from "./Transport.js"
import type { Target } from "./UrlPolicy.js"

export interface WebhookSenderService {
  /**
   * The signing secrets of a webhook row: the current one first, then the previous one while
   * its rotation window lasts. SecretUnreadable when one does not open with this server's key.
   */
  readonly openSecrets: (
    accountId: string,
    current: string,
    previous: string | null
  ) => Result.Result<ReadonlyArray<string>, SecretUnreadable>
  /** One attempt, the URL checked (and its host resolved) within the attempt's timeout; never fails. */
  readonly attempt: (input: AttemptInput) => Effect.Effect<AttemptOutcome>
  /** One attempt to a target the caller has just checked; never fails. */
  readonly attemptAt: (target: Target, input: AttemptInput) => Effect.Effect<AttemptOutcome>
}

const make = Effect.gen(function*() {
  const transport = yield* WebhookTransport
  const config = yield* WebhookConfig
  const secrets = yield* Secrets
  const box = makeSecretBox(Redacted.value(secrets.webhookSecretKey))
  const attempts = makeAttempts(transport, attemptRules(config))
  return WebhookSender.of({
    openSecrets: (accountId, current, previous) =>
      Result.all(previous === null ? [box.open(current, accountId)] : [box.open(current, accountId), box.open(previous, accountId)]),
    attempt: attempts.attempt,
    attemptAt: attempts.attemptAt
  })
})

export class WebhookSender extends Context.Service<WebhookSender, WebhookSenderService>()("hookline/WebhookSender") {
  /** Needs the transport and the secrets from outside (tests bring a fake transport). */
  static readonly layerWithoutDependencies = Layer.effect(WebhookSender, make)
  static readonly layer = WebhookSender.layerWithoutDependencies.pipe(Layer.provide([Secrets.layer, WebhookTransport.layer]))
}
