/** Helpers the clip-scoring tests share: links, PUTs, polling, and the money checks. */
import { expect } from "bun:test"
import { Effect, Layer } from "effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import type Pg from "pg"
import { type ClipScore, ClipScorer } from "../../src/Predictions/Scorer.js"
import type { Clip } from "./clips.js"
import { ledgerState, type PredictionBody, type TestServer, type UploadLink, type WebhookEvent } from "./server.js"
/** Polls `probe` until it returns a value (not undefined); the deadline only guards against a hang. */
export const waitFor = async <T>(what: string, probe: () => Promise<T | undefined>, deadlineMs = 30_000): Promise<T> => {
  const started = Date.now()
  while (true) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() - started > deadlineMs) throw new Error(`gave up waiting for ${what}`)
    await Bun.sleep(25)
  }
}

/** Test servers announce PUBLIC_BASE_URL in their links; the tests reach them on their real address. */
export const publicBase = "https://api.hookline.example"

export const createLink = async (server: TestServer, key: string): Promise<UploadLink> => {
  const response = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })
  expect(response.status).toBe(200)
  const link = response.body
  return link.upload_url.startsWith(publicBase) ? { ...link, upload_url: server.url + link.upload_url.slice(publicBase.length) } : link
}

export interface PutResponse {
  readonly status: number
  readonly headers: Headers
  readonly body: unknown
}

export const put = async (url: string, body: BodyInit, headers: Record<string, string> = {}): Promise<PutResponse> => {
  const response = await fetch(url, { method: "PUT", body, headers })
  const text = await response.text()
  return { status: response.status, headers: response.headers, body: text === "" ? null : JSON.parse(text) }
}

export const putClip = (url: string, clip: Clip) => put(url, readFileSync(clip.path))

export const expectReceived = (response: PutResponse, link: UploadLink) => {
  expect(response.status).toBe(200)
  expect(response.body).toEqual({ object: "upload", upload_id: link.upload_id, prediction_id: link.prediction_id, status: "received" })
}

export const getPrediction = (server: TestServer, key: string, id: string) => server.request<PredictionBody>(`/v1/predict/${id}`, { key })

export const waitForStatus = (server: TestServer, key: string, id: string, status: string) =>
  waitFor(`${id} to be ${status}`, async () => {
    const response = await getPrediction(server, key, id)
    return response.body?.status === status ? response.body : undefined
  })

/**
 * Ages two rows in one statement, `kept` just short of a limit and `witness` just past it, and waits
 * until a sweep has failed the witness as expired. The sweep looked at both, so whatever `kept` is
 * then is the sweep's decision, not a sweep that has not come yet.
 */
export const ageAcrossLimit = async (
  server: TestServer,
  rows: {
    readonly table: "uploads" | "predictions"
    readonly column: "received_at" | "queued_at"
    readonly kept: string
    readonly witness: string
    readonly short: string
    readonly past: string
  },
  witnessWatch: { readonly key: string; readonly predictionId: string }
) => {
  await server.db.query(
    `UPDATE ${rows.table} SET ${rows.column} = now() - CASE WHEN id = $1 THEN $3::interval ELSE $4::interval END WHERE id = ANY($2)`,
    [rows.kept, [rows.kept, rows.witness], rows.short, rows.past]
  )
  expect((await waitForStatus(server, witnessWatch.key, witnessWatch.predictionId, "failed")).error!.type).toBe("expired")
}

/** The credit journal rows of one prediction (reserve, release), in order. */
export const journalOf = async (db: Pg.Pool, predictionId: string) =>
  (await db.query(
    "SELECT entry_type, bucket, amount::int AS amount FROM credit_journal WHERE reference_id = $1 ORDER BY seq",
    [predictionId]
  )).rows

export const holdsOf = async (db: Pg.Pool, predictionId: string) =>
  (await db.query(
    `SELECT status, monthly_amount::int AS monthly, topup_amount::int AS topup,
            settled_monthly::int AS settled_monthly, settled_topup::int AS settled_topup
       FROM holds WHERE reference_id = $1`,
    [predictionId]
  )).rows

/** The wallet, checked against its journal: balances equal the journal's sums. */
export const expectWallet = async (db: Pg.Pool, accountId: string, expected: { monthly: number; topup: number; pendingHolds: number }) => {
  const state = await ledgerState(db, accountId)
  expect(state).toEqual({ ...expected, journalMonthly: expected.monthly, journalTopup: expected.topup })
}

export const eventsOf = async (db: Pg.Pool, accountId: string) =>
  (await db.query<{ event_type: string; payload: WebhookEvent }>(
    "SELECT event_type, payload FROM webhook_deliveries WHERE account_id = $1 ORDER BY created_at",
    [accountId]
  )).rows

export const uploadRow = async (db: Pg.Pool, uploadId: string) =>
  (await db.query("SELECT status, blob_key, size_bytes::int AS size_bytes, media_kind FROM uploads WHERE id = $1", [uploadId])).rows[0]

export const predictionRow = async (db: Pg.Pool, predictionId: string) =>
  (await db.query("SELECT status, attempts, claimed_by, hold_id FROM predictions WHERE id = $1", [predictionId])).rows[0]

export const blobPath = (server: TestServer, uploadId: string) => join(server.dataDir, "blobs", "uploads", uploadId)

export const sampleScore: ClipScore = {
  band: "high",
  hookDurationSec: 1.2,
  durationSec: 8.5,
  category: null,
  features: { motion: 5.5 }
}

export const instantScorer = Layer.succeed(ClipScorer, ClipScorer.of({ score: () => Effect.succeed(sampleScore) }))

export const fastBackground = {
  PUBLIC_BASE_URL: publicBase,
  PREDICTION_SWEEP_INTERVAL: "100 millis",
  WORKER_POLL_INTERVAL: "100 millis",
  HEARTBEAT_INTERVAL: "100 millis"
}
