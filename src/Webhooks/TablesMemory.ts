/** The webhook tables as the in-memory WebhooksRepo keeps them (RepoMemory.ts, DeliveriesMemory.ts). */
import type { DeliveryStatus, EventType } from "./Api.js"

/** A row of `webhooks`. */
export interface MemoryWebhook {
  readonly accountId: string
  url: string
  enabled: boolean
  secretCiphertext: string
  previousSecretCiphertext: string | null
  previousSecretExpiresAt: Date | null
  /** Null: all event types. */
  events: ReadonlyArray<EventType> | null
  failingSince: Date | null
  disabledReason: "gone" | "failing" | null
  disabledAt: Date | null
  updatedAt: Date
}

/** A row of `webhook_deliveries`. */
export interface MemoryDelivery {
  readonly id: string
  readonly eventId: string
  readonly accountId: string
  readonly eventType: EventType
  /** The exact JSON that is signed and sent. */
  readonly body: string
  status: DeliveryStatus
  attempts: number
  nextAttemptAt: Date
  lastStatusCode: number | null
  lastError: string | null
  readonly createdAt: Date
  completedAt: Date | null
  /** The dispatcher claim that owns the delivery now (null: none). */
  claimToken: string | null
}

/** A row of `webhook_attempts`. */
export interface MemoryAttempt {
  /** The bigserial id. */
  readonly id: number
  readonly deliveryId: string
  readonly attempt: number
  readonly dispatcher: string
  readonly statusCode: number | null
  readonly durationMs: number
  readonly error: string | null
  readonly attemptedAt: Date
}

export interface MemoryWebhooksState {
  webhooks: Map<string, MemoryWebhook>
  deliveries: Map<string, MemoryDelivery>
  attempts: Array<MemoryAttempt>
  /** The attempts' bigserial: the last id given (ids are never reused, sweeps included). */
  lastAttemptId: number
  /** pg_notify calls, in order (PostgreSQL delivers them when the transaction commits). */
  notifications: Array<{ readonly channel: string; readonly payload: string }>
}
