/**
 * The webhook delivery baseline: the dispatcher's work written by hand with `pg` and `fetch`, no
 * framework. It claims due deliveries with the Dispatcher's own statement (FOR UPDATE SKIP
 * LOCKED, lease, claim token), opens the account's secret and signs the exact stored body as the
 * Dispatcher does (src/Webhooks/SecretBox.ts, Signing.ts: plain functions), POSTs it, and records
 * the attempt and the outcome with the Dispatcher's statement. It is woken by the same
 * LISTEN channel and keeps the same number of deliveries in flight.
 *
 * What it leaves out: Effect fibers and schedules, schema decoding of rows, the URL policy's
 * checks (the receiver is a loopback IP literal, allowed by configuration on both sides), spans,
 * metrics and logs.
 */
import { Result } from "effect"
import { randomUUID } from "node:crypto"
import Pg from "pg"
import { deliveriesChannel } from "../../src/Webhooks/Repo.js"
import { makeSecretBox } from "../../src/Webhooks/SecretBox.js"
import { signatureHeaders } from "../../src/Webhooks/Signing.js"

interface ClaimedRow {
  readonly id: string
  readonly event_id: string
  readonly account_id: string
  readonly attempts: number
  readonly body: string
  readonly url: string | null
  readonly enabled: boolean | null
  readonly secret_ciphertext: string | null
}

/** src/Webhooks/Repo.ts `claimDueDeliveries`. */
const claimSql = `
        WITH due AS (
          SELECT id, account_id FROM webhook_deliveries
           WHERE status = 'pending' AND next_attempt_at <= now()
           ORDER BY next_attempt_at
           LIMIT $1
           FOR UPDATE SKIP LOCKED
        )
        UPDATE webhook_deliveries d
           SET attempts = d.attempts + 1,
               next_attempt_at = now() + $2::float8 * interval '1 millisecond',
               claim_token = $3
          FROM due LEFT JOIN webhooks w ON w.account_id = due.account_id
         WHERE d.id = due.id
        RETURNING d.id, d.event_id, d.account_id, d.attempts, COALESCE(d.body, d.payload::text) AS body,
                  w.url, w.enabled, w.secret_ciphertext,
                  CASE WHEN w.previous_secret_expires_at > now() THEN w.previous_secret_ciphertext END
                    AS previous_secret_ciphertext`

/** src/Webhooks/Repo.ts `recordAttempt`, for a delivered attempt. */
const recordSql = `
        WITH attempt AS (
          INSERT INTO webhook_attempts (delivery_id, attempt, dispatcher, status_code, duration_ms, error)
          VALUES ($1, $2, $3, $4, $5, $6)
        )
        UPDATE webhook_deliveries
           SET status = $7,
               next_attempt_at = now() + $8::float8 * interval '1 millisecond',
               last_status_code = $4,
               last_error = $6,
               completed_at = now(),
               claim_token = NULL
         WHERE id = $1 AND claim_token = $9`

export interface BareDispatcher {
  readonly stop: () => Promise<void>
}

/**
 * Starts delivering every due delivery of `databaseUrl`, at most `concurrency` at once, until
 * stopped. `secretKey` is WEBHOOK_SECRET_KEY (the secrets are stored encrypted).
 */
export const startBareDispatcher = async (options: {
  readonly databaseUrl: string
  readonly secretKey: string
  readonly concurrency: number
  readonly poolSize: number
  readonly leaseMs?: number
}): Promise<BareDispatcher> => {
  const pool = new Pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize, application_name: "hookline-baseline" })
  pool.on("error", () => {})
  const box = makeSecretBox(options.secretKey)
  const dispatcherId = `dsp_bare_${randomUUID().replaceAll("-", "")}`
  const leaseMs = options.leaseMs ?? 60_000
  let stopped = false
  let inFlight = 0
  let wake: (() => void) | null = null
  const ring = () => {
    wake?.()
    wake = null
  }

  const listener = new Pg.Client({ connectionString: options.databaseUrl })
  await listener.connect()
  listener.on("notification", ring)
  await listener.query(`LISTEN ${deliveriesChannel}`)

  const deliver = async (row: ClaimedRow, token: string) => {
    const started = performance.now()
    let statusCode: number | null = null
    let error: string | null = null
    try {
      if (row.url === null || row.secret_ciphertext === null) throw new Error("no webhook")
      const secret = Result.getOrThrow(box.open(row.secret_ciphertext, row.account_id))
      const headers = {
        "content-type": "application/json",
        ...signatureHeaders([secret], row.event_id, Math.floor(Date.now() / 1000), row.body)
      }
      const response = await fetch(row.url, { method: "POST", headers, body: row.body, redirect: "manual", signal: AbortSignal.timeout(10_000) })
      await response.arrayBuffer()
      statusCode = response.status
    } catch (cause) {
      error = cause instanceof Error ? cause.message : String(cause)
    }
    const delivered = statusCode !== null && statusCode >= 200 && statusCode < 300
    await pool.query(recordSql, [
      row.id,
      row.attempts,
      dispatcherId,
      statusCode,
      Math.round(performance.now() - started),
      error ?? (delivered ? null : `status ${statusCode}`),
      delivered ? "delivered" : "failed",
      0,
      token
    ])
  }

  const loop = (async () => {
    while (!stopped) {
      const free = options.concurrency - inFlight
      let claimed: Array<ClaimedRow> = []
      if (free > 0) {
        const token = randomUUID()
        claimed = (await pool.query<ClaimedRow>(claimSql, [free, leaseMs, token])).rows
        for (const row of claimed) {
          inFlight++
          void deliver(row, token).finally(() => {
            inFlight--
            ring()
          })
        }
      }
      if (claimed.length === free && free > 0) continue
      // Nothing more due: wait for a NOTIFY, a finished delivery or a second.
      await new Promise<void>((resolve) => {
        wake = resolve
        setTimeout(resolve, 1_000)
      })
    }
  })()

  return {
    stop: async () => {
      stopped = true
      ring()
      await loop
      while (inFlight > 0) await Bun.sleep(10)
      await listener.end()
      await pool.end()
    }
  }
}
