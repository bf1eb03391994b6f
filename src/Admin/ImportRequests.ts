/**
 * The requests of `catalog import`: one NDJSON chunk per POST /admin/catalog/hooks, retried on
 * network failures and 5xx answers, its body completed only once the request before it committed.
 */
import { Cause, Duration, Effect, Exit, Schedule } from "effect"
import type { ImportResult } from "../Hooks/Api.js"

export interface AdminEndpoint {
  readonly baseUrl: string
  readonly adminToken: string
}

export interface ChunkingOptions {
  /** First line to import (1-based); earlier lines are skipped. */
  readonly fromLine: number
  /** Most bytes per request (whole lines; a longer single line goes alone). */
  readonly chunkBytes: number
  /** Attempts after the first for a request that failed on the network or with a 5xx. */
  readonly retries: number
  readonly retryDelayMs: number
}

export const defaultChunking: ChunkingOptions = { fromLine: 1, chunkBytes: 32 * 1024 * 1024, retries: 2, retryDelayMs: 1_000 }

/** The error envelope's message, or the status line. */
export const failureOf = async (response: Response): Promise<string> => {
  const text = await response.text().catch(() => "")
  try {
    const body = JSON.parse(text) as { error?: { type?: string; message?: string } }
    if (body.error?.message !== undefined) return `HTTP ${response.status} ${body.error.type ?? ""}: ${body.error.message}`
  } catch {
    // not the envelope
  }
  return `HTTP ${response.status} ${response.statusText}`
}

export class RequestFailed extends Error {
  constructor(message: string, readonly retryable: boolean) {
    super(message)
  }
}

/**
 * The body of a request, streamed: all but its last byte at once, the last byte once `gate`
 * answers true. The server stages records as they arrive but writes the catalog only when the body
 * is complete, so the request can be staged while the previous one commits, and the catalog is
 * still written in file order (of two records with one id in different requests, the later wins).
 * When `gate` answers false (the previous request failed for good) the body breaks off: the server
 * writes nothing from it.
 */
const gatedBody = (body: Uint8Array<ArrayBuffer>, gate: Promise<boolean>) =>
  new ReadableStream<Uint8Array>({
    async start(controller) {
      if (body.byteLength > 1) controller.enqueue(body.subarray(0, body.byteLength - 1))
      const go = await gate
      try {
        if (!go) return controller.error(new Error(previousFailed))
        controller.enqueue(body.subarray(body.byteLength - 1))
        controller.close()
      } catch {
        // The server answered before the body was complete (e.g. 413): nothing left to send.
      }
    }
  })

const previousFailed = "the request before it failed"

const postChunk = async (endpoint: AdminEndpoint, body: Uint8Array<ArrayBuffer>, gate: Promise<boolean>): Promise<ImportResult> => {
  let response: Response
  try {
    response = await fetch(`${endpoint.baseUrl}/admin/catalog/hooks`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${endpoint.adminToken}`,
        "content-type": "application/x-ndjson",
        "content-length": String(body.byteLength)
      },
      body: gatedBody(body, gate)
    })
  } catch (error) {
    if (!(await gate)) throw new RequestFailed(previousFailed, false)
    throw new RequestFailed(`the request failed: ${error instanceof Error ? error.message : String(error)}`, true)
  }
  if (response.status === 200) return (await response.json()) as ImportResult
  const reason = await failureOf(response)
  throw new RequestFailed(
    response.status === 413 ? `${reason} (send smaller requests with --chunk-bytes)` : reason,
    response.status >= 500
  )
}

/**
 * Sends one chunk, retrying network failures and 5xx answers (safe: a chunk commits whole or not
 * at all) `retries` times, `retryDelayMs` doubling after each; the first attempt completes its
 * body once the previous chunk has committed (`gate`).
 */
export const postWithRetries = async (
  endpoint: AdminEndpoint,
  body: Uint8Array<ArrayBuffer>,
  options: ChunkingOptions,
  gate: Promise<boolean>
): Promise<ImportResult> => {
  const exit = await Effect.runPromiseExit(
    Effect.tryPromise({ try: () => postChunk(endpoint, body, gate), catch: (error) => error }).pipe(
      Effect.retry({
        schedule: Schedule.exponential(Duration.millis(options.retryDelayMs)),
        times: options.retries,
        while: (error) => error instanceof RequestFailed && error.retryable
      })
    )
  )
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}
