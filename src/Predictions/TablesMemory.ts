/**
 * The predictions and uploads tables in memory, and the SQL comparisons and joins both in-memory
 * repositories make over them: JobsRepoMemory.ts and UploadsRepoMemory.ts share one such state.
 */
import type { PredictionStatus } from "./Domain.js"

export type MemoryUploadStatus = "pending" | "receiving" | "received" | "expired"

/** A row of `predictions`. */
export interface MemoryPrediction {
  readonly id: string
  readonly accountId: string
  readonly keyId: string
  status: PredictionStatus
  holdId: string | null
  inputDurationSec: number | null
  /** The stored result, parsed (a jsonb column). */
  result: unknown
  errorType: string | null
  errorMessage: string | null
  attempts: number
  claimedBy: string | null
  heartbeatAt: Date | null
  queuedAt: Date | null
  startedAt: Date | null
  completedAt: Date | null
  traceParent: string | null
  readonly createdAt: Date
}

/** A row of `uploads`. */
export interface MemoryUpload {
  readonly id: string
  readonly predictionId: string
  readonly accountId: string
  readonly keyId: string
  readonly tokenHash: string
  status: MemoryUploadStatus
  readonly expiresAt: Date
  blobKey: string | null
  sizeBytes: number | null
  mediaKind: string | null
  receivedAt: Date | null
  receivingStartedAt: Date | null
  readonly createdAt: Date
}

/** The tables the prediction statements read and write, as plain data a test may seed and read. */
export interface MemoryPredictionsState {
  /** What these statements read of `accounts`: a suspended account's links and landings are refused. */
  accounts: Map<string, { suspended: boolean }>
  /** What they read of `api_keys`: a revoked key's links and landings are refused. */
  apiKeys: Map<string, { accountId: string; revoked: boolean }>
  predictions: Map<string, MemoryPrediction>
  uploads: Map<string, MemoryUpload>
  /** pg_notify calls, in order (PostgreSQL delivers them when the transaction commits). */
  notifications: Array<{ readonly channel: string; readonly payload: string }>
  /** Advisory locks asked for, in order (UploadsRepo): here they serialise nothing. */
  advisoryLocks: Array<{ readonly lock: "keyLinks" | "unpaidClips"; readonly id: string }>
}

export const emptyPredictionsState = (): MemoryPredictionsState => ({
  accounts: new Map(),
  apiKeys: new Map(),
  predictions: new Map(),
  uploads: new Map(),
  notifications: [],
  advisoryLocks: []
})

/** `column <= bound`, false for NULL as in SQL. */
export const atOrBefore = (value: Date | null, bound: Date): boolean => value !== null && value.getTime() <= bound.getTime()

/** The upload row of a prediction (uploads.prediction_id is unique). */
export const uploadOf = (state: MemoryPredictionsState, predictionId: string): MemoryUpload | undefined => {
  for (const upload of state.uploads.values()) if (upload.predictionId === predictionId) return upload
  return undefined
}

/** Whether the key is live and its account not suspended (the joins of the SQL's landing checks). */
export const keyIsLive = (state: MemoryPredictionsState, keyId: string, accountId: string): boolean =>
  state.apiKeys.get(keyId)?.revoked === false && state.accounts.get(accountId)?.suspended === false
