/**
 * JobsRepo in memory, for tests of the jobs service's decisions without a database. Every
 * transition is the PostgreSQL repository's conditional UPDATE, with the same guard: a job in the
 * wrong state is left as it is and the call answers false / None, as the SQL does. Times are the
 * caller's, as there. The PostgreSQL repository remains the proof of the SQL (the contract suite
 * in test/memory-repos-jobs.test.ts runs both through the same cases).
 *
 * What differs: row locks (FOR UPDATE, SKIP LOCKED) take nothing, since each statement here runs
 * whole on one thread; pg_notify is recorded in `state.notifications`, not sent; `hold_id` is not
 * checked against the holds table (the Ledger's memory keeps those). Rows the SQL returns in no
 * stated order (findStalled, findUnpaidBefore, countByStatus) come in insertion order.
 *
 * The predictions and uploads tables are shared with UploadsRepoMemory.ts: give both the same state.
 * They are defined in TablesMemory.ts.
 */
import { Effect, Layer, Option, Schema } from "effect"
import type { PredictionStatus } from "./Domain.js"
import { JobsRepo, jobsChannel } from "./JobsRepo.js"
import { type ClaimedJob, type FinishGuard, PredictionRow } from "./Rows.js"
import {
  atOrBefore,
  emptyPredictionsState,
  keyIsLive,
  type MemoryPrediction,
  type MemoryPredictionsState,
  type MemoryUpload,
  uploadOf
} from "./TablesMemory.js"

/** Decoded as the SQL's rows are: a row the schema refuses is a defect here too. */
const decodePredictionRow = (prediction: MemoryPrediction, upload: MemoryUpload) =>
  Schema.decodeUnknownEffect(PredictionRow)({
    id: prediction.id,
    account_id: prediction.accountId,
    status: prediction.status,
    hold_id: prediction.holdId,
    input_duration_sec: prediction.inputDurationSec,
    result: prediction.result,
    error_type: prediction.errorType,
    error_message: prediction.errorMessage,
    created_at: prediction.createdAt,
    completed_at: prediction.completedAt,
    upload_id: upload.id,
    upload_status: upload.status
  }).pipe(Effect.orDie)

type Repo = JobsRepo["Service"]

/** The prediction with its upload (the SQL's inner join): None when either is missing or `matches` refuses it. */
const findJoined = (state: MemoryPredictionsState, id: string, matches: (prediction: MemoryPrediction) => boolean) =>
  Effect.suspend(() => {
    const prediction = state.predictions.get(id)
    const upload = prediction === undefined ? undefined : uploadOf(state, id)
    if (prediction === undefined || upload === undefined || !matches(prediction)) return Effect.succeedNone
    return Effect.map(decodePredictionRow(prediction, upload), Option.some)
  })

const reads = (state: MemoryPredictionsState) => ({
  findPrediction: (id: string) => findJoined(state, id, () => true),
  findVisiblePrediction: ({ createdAfter, id, keyId }: Parameters<Repo["findVisiblePrediction"]>[0]) =>
    findJoined(state, id, (prediction) => prediction.keyId === keyId && prediction.createdAt.getTime() > createdAfter.getTime()),
  lockForLanding: (id: string) =>
    Effect.sync(() => {
      const prediction = state.predictions.get(id)
      if (prediction === undefined || !keyIsLive(state, prediction.keyId, prediction.accountId)) return Option.none()
      return Option.some({ status: prediction.status, account_id: prediction.accountId, key_id: prediction.keyId })
    }),
  lockForRetryStart: ({ createdAfter, keyId, uploadId }: Parameters<Repo["lockForRetryStart"]>[0]) =>
    Effect.sync(() => {
      const upload = state.uploads.get(uploadId)
      const prediction = upload === undefined ? undefined : state.predictions.get(upload.predictionId)
      if (upload === undefined || prediction === undefined || upload.keyId !== keyId) return Option.none()
      if (prediction.createdAt.getTime() <= createdAfter.getTime()) return Option.none()
      return Option.some({ prediction_id: prediction.id, status: prediction.status, upload_status: upload.status })
    })
})

/** Runs `move` on the prediction when `guard` admits it; answers whether a row moved. */
const moveIf = (
  state: MemoryPredictionsState,
  id: string,
  guard: (prediction: MemoryPrediction) => boolean,
  move: (prediction: MemoryPrediction) => void
) =>
  Effect.sync(() => {
    const prediction = state.predictions.get(id)
    if (prediction === undefined || !guard(prediction)) return false
    move(prediction)
    return true
  })

const heldBy = (prediction: MemoryPrediction, workerId: string) => prediction.status === "running" && prediction.claimedBy === workerId

const transitions = (state: MemoryPredictionsState) => {
  /** The SQL's pick: fewest running jobs of the account first, then the oldest queued, then the id. */
  const nextQueued = (queuedAfter: Date): MemoryPrediction | undefined => {
    const running = new Map<string, number>()
    for (const prediction of state.predictions.values()) {
      if (prediction.status === "running") running.set(prediction.accountId, (running.get(prediction.accountId) ?? 0) + 1)
    }
    const candidates = [...state.predictions.values()].filter((prediction) =>
      prediction.status === "queued" && prediction.queuedAt !== null && prediction.queuedAt.getTime() > queuedAfter.getTime()
    )
    const rank = (prediction: MemoryPrediction) => running.get(prediction.accountId) ?? 0
    candidates.sort((a, b) =>
      rank(a) - rank(b) || (a.queuedAt?.getTime() ?? 0) - (b.queuedAt?.getTime() ?? 0) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
    )
    return candidates[0]
  }

  return {
    queueJob: ({ holdId, id, now, traceParent }: Parameters<Repo["queueJob"]>[0]) =>
      moveIf(state, id, (prediction) => prediction.status === "awaiting_upload", (prediction) => {
        prediction.status = "queued"
        prediction.holdId = holdId
        prediction.queuedAt = now
        prediction.traceParent = traceParent
      }),
    claimNextJob: ({ now, queuedAfter, workerId }: Parameters<Repo["claimNextJob"]>[0]) =>
      Effect.sync((): Option.Option<ClaimedJob> => {
        const prediction = nextQueued(queuedAfter)
        if (prediction === undefined) return Option.none()
        prediction.status = "running"
        prediction.attempts += 1
        prediction.claimedBy = workerId
        prediction.heartbeatAt = now
        prediction.startedAt = prediction.startedAt ?? now
        return Option.some({
          id: prediction.id,
          attempts: prediction.attempts,
          blob_key: uploadOf(state, prediction.id)?.blobKey ?? null,
          trace_parent: prediction.traceParent
        })
      }),
    heartbeat: ({ id, now, workerId }: Parameters<Repo["heartbeat"]>[0]) =>
      moveIf(state, id, (prediction) => heldBy(prediction, workerId), (prediction) => {
        prediction.heartbeatAt = now
      }),
    handBack: ({ id, now, workerId }: Parameters<Repo["handBack"]>[0]) =>
      moveIf(state, id, (prediction) => heldBy(prediction, workerId), (prediction) => {
        prediction.status = "queued"
        prediction.claimedBy = null
        prediction.heartbeatAt = null
        prediction.queuedAt = now
        prediction.attempts -= 1
      }),
    requeueStalled: ({ heartbeatBefore, id, maxAttempts, now }: Parameters<Repo["requeueStalled"]>[0]) =>
      moveIf(
        state,
        id,
        (prediction) => prediction.status === "running" && atOrBefore(prediction.heartbeatAt, heartbeatBefore) && prediction.attempts < maxAttempts,
        (prediction) => {
          prediction.status = "queued"
          prediction.claimedBy = null
          prediction.heartbeatAt = null
          prediction.queuedAt = now
        }
      )
  }
}

/** The SQL's guard of each terminal transition. */
const meetsGuard = (state: MemoryPredictionsState, prediction: MemoryPrediction, guard: FinishGuard): boolean => {
  switch (guard._tag) {
    case "HeldBy":
      return heldBy(prediction, guard.workerId)
    case "AwaitingUpload":
      return prediction.status === "awaiting_upload"
    case "StalledOut":
      return prediction.status === "running" && atOrBefore(prediction.heartbeatAt, guard.heartbeatBefore) &&
        prediction.attempts >= guard.maxAttempts
    case "QueuedBefore":
      return prediction.status === "queued" && atOrBefore(prediction.queuedAt, guard.queuedBefore)
    case "UnpaidBefore": {
      const upload = uploadOf(state, prediction.id)
      return prediction.status === "awaiting_upload" && upload?.status === "received" && atOrBefore(upload.receivedAt, guard.receivedBefore)
    }
  }
}

const finishing = (state: MemoryPredictionsState) => ({
  finishJob: (finish: Parameters<Repo["finishJob"]>[0]) =>
    Effect.sync(() => {
      const prediction = state.predictions.get(finish.id)
      if (prediction === undefined || !meetsGuard(state, prediction, finish.guard)) return Option.none()
      // `::jsonb` refuses text that is not JSON; JSON.parse throws, a defect as there.
      const result: unknown = finish.result === null ? null : JSON.parse(finish.result)
      prediction.status = finish.status
      prediction.result = result
      prediction.errorType = finish.errorType
      prediction.errorMessage = finish.errorMessage
      prediction.inputDurationSec = finish.durationSec ?? prediction.inputDurationSec
      prediction.completedAt = finish.now
      prediction.claimedBy = null
      return Option.some({ hold_id: prediction.holdId, account_id: prediction.accountId })
    })
})

const scans = (state: MemoryPredictionsState) => {
  const ids = (rows: ReadonlyArray<MemoryPrediction>, limit: number) => rows.slice(0, limit).map((prediction) => ({ id: prediction.id }))
  const withStatus = (status: PredictionStatus) => [...state.predictions.values()].filter((prediction) => prediction.status === status)

  return {
    findStalled: ({ before, limit }: Parameters<Repo["findStalled"]>[0]) =>
      Effect.sync(() => ids(withStatus("running").filter((prediction) => atOrBefore(prediction.heartbeatAt, before)), limit)),
    findQueuedBefore: ({ before, limit }: Parameters<Repo["findQueuedBefore"]>[0]) =>
      Effect.sync(() =>
        ids(
          withStatus("queued")
            .filter((prediction) => atOrBefore(prediction.queuedAt, before))
            .sort((a, b) => (a.queuedAt?.getTime() ?? 0) - (b.queuedAt?.getTime() ?? 0)),
          limit
        )
      ),
    findUnpaidBefore: ({ before, limit }: Parameters<Repo["findUnpaidBefore"]>[0]) =>
      Effect.sync(() =>
        ids(
          withStatus("awaiting_upload").filter((prediction) => {
            const upload = uploadOf(state, prediction.id)
            return upload?.status === "received" && atOrBefore(upload.receivedAt, before)
          }),
          limit
        )
      ),
    countByStatus: () =>
      Effect.sync(() => {
        const counts = new Map<string, number>()
        for (const prediction of state.predictions.values()) counts.set(prediction.status, (counts.get(prediction.status) ?? 0) + 1)
        return [...counts].map(([status, n]) => ({ status, n }))
      }),
    oldestQueuedSeconds: (now: Date) =>
      Effect.sync(() => {
        const queuedAt = withStatus("queued").flatMap((prediction) => prediction.queuedAt === null ? [] : [prediction.queuedAt.getTime()])
        return queuedAt.length === 0 ? 0 : (now.getTime() - Math.min(...queuedAt)) / 1000
      })
  }
}

/**
 * A JobsRepo over `seed` (a fresh, empty state when not given; UploadsRepoMemory's state to share
 * its tables): its layer, and the state for a test to seed and read.
 */
export const makeJobsRepoInMemory = (seed?: MemoryPredictionsState) => {
  const state = seed ?? emptyPredictionsState()
  const repo: Repo = {
    ...reads(state),
    ...transitions(state),
    ...finishing(state),
    ...scans(state),
    announceQueued: () => Effect.sync(() => void state.notifications.push({ channel: jobsChannel, payload: "queued" }))
  }
  return { layer: Layer.succeed(JobsRepo, repo), state }
}
