/**
 * UploadsRepo in memory, for tests of the uploads service's decisions without a database. Each
 * statement is the PostgreSQL repository's, with the same guard: a link in the wrong state is left
 * as it is and the call answers false / None, as the SQL does; keys and ids are unique as there.
 * Times are the caller's. The PostgreSQL repository remains the proof of the SQL (the contract
 * suite in test/memory-repos-jobs.test.ts runs both through the same cases).
 *
 * What differs: the advisory locks (lockKeyLinks, lockUnpaidClips) serialise nothing, since
 * this repository cannot see where the caller's transaction ends; they are recorded in
 * `state.advisoryLocks`. Races between link requests or landings are proven on PostgreSQL only.
 * Rows the SQL returns in no stated order (findStalledReceives, findLeftoverFiles, findByIds) come
 * in insertion order.
 *
 * Shares the predictions and uploads tables (TablesMemory.ts) with JobsRepoMemory.ts: give both
 * the same state.
 */
import { Effect, Layer, Option } from "effect"
import {
  atOrBefore,
  emptyPredictionsState,
  keyIsLive,
  type MemoryPredictionsState,
  type MemoryUpload,
  type MemoryUploadStatus
} from "./TablesMemory.js"
import { UploadsRepo } from "./UploadsRepo.js"

type Repo = UploadsRepo["Service"]

/** A constraint the database would refuse: a defect, as the SQL error is at the repository's boundary. */
const violation = (message: string) => Effect.die(new Error(`in-memory uploads: ${message}`))

const byExpiry = (a: MemoryUpload, b: MemoryUpload) => a.expiresAt.getTime() - b.expiresAt.getTime()

/** Runs `move` on the upload when `guard` admits it; answers the moved upload. */
const moveIf = (
  state: MemoryPredictionsState,
  find: (upload: MemoryUpload) => boolean,
  guard: (upload: MemoryUpload) => boolean,
  move: (upload: MemoryUpload) => void
): Option.Option<MemoryUpload> => {
  for (const upload of state.uploads.values()) {
    if (!find(upload)) continue
    if (!guard(upload)) return Option.none()
    move(upload)
    return Option.some(upload)
  }
  return Option.none()
}

const claim = (upload: MemoryUpload, now: Date) => {
  upload.status = "receiving"
  upload.receivingStartedAt = now
}

const linkStatements = (state: MemoryPredictionsState) => ({
  /** The job and its link, as the SQL's two INSERTs: the first stays when the second is refused. */
  createUploadLink: (link: Parameters<Repo["createUploadLink"]>[0]) =>
    Effect.suspend(() => {
      if (!state.accounts.has(link.accountId)) return violation(`no account ${link.accountId}`)
      if (!state.apiKeys.has(link.keyId)) return violation(`no api key ${link.keyId}`)
      if (state.predictions.has(link.predictionId)) return violation(`duplicate prediction ${link.predictionId}`)
      state.predictions.set(link.predictionId, {
        id: link.predictionId,
        accountId: link.accountId,
        keyId: link.keyId,
        status: "awaiting_upload",
        holdId: null,
        inputDurationSec: null,
        result: null,
        errorType: null,
        errorMessage: null,
        attempts: 0,
        claimedBy: null,
        heartbeatAt: null,
        queuedAt: null,
        startedAt: null,
        completedAt: null,
        traceParent: null,
        createdAt: link.now
      })
      const uploads = [...state.uploads.values()]
      if (state.uploads.has(link.uploadId)) return violation(`duplicate upload ${link.uploadId}`)
      if (uploads.some((upload) => upload.predictionId === link.predictionId)) return violation(`second upload of ${link.predictionId}`)
      if (uploads.some((upload) => upload.tokenHash === link.tokenHash)) return violation("duplicate token hash")
      state.uploads.set(link.uploadId, {
        id: link.uploadId,
        predictionId: link.predictionId,
        accountId: link.accountId,
        keyId: link.keyId,
        tokenHash: link.tokenHash,
        status: "pending",
        expiresAt: link.expiresAt,
        blobKey: link.blobKey,
        sizeBytes: null,
        mediaKind: null,
        receivedAt: null,
        receivingStartedAt: null,
        createdAt: link.now
      })
      return Effect.void
    }),
  /** A link dies with its key or a suspended account, as well as with time. */
  findByToken: ({ now, tokenHash }: Parameters<Repo["findByToken"]>[0]) =>
    Effect.sync(() => {
      const upload = [...state.uploads.values()].find((candidate) => candidate.tokenHash === tokenHash)
      const key = upload === undefined ? undefined : state.apiKeys.get(upload.keyId)
      if (upload === undefined || key === undefined || !state.accounts.has(upload.accountId)) return Option.none()
      return Option.some({
        id: upload.id,
        prediction_id: upload.predictionId,
        account_id: upload.accountId,
        status: upload.status,
        blob_key: upload.blobKey,
        expired: upload.expiresAt.getTime() <= now.getTime() || !keyIsLive(state, upload.keyId, upload.accountId)
      })
    })
})

const landingStatements = (state: MemoryPredictionsState) => ({
  claimByToken: ({ now, tokenHash }: Parameters<Repo["claimByToken"]>[0]) =>
    Effect.sync(() =>
      Option.isSome(moveIf(
        state,
        (upload) => upload.tokenHash === tokenHash,
        (upload) => upload.status === "pending" && upload.expiresAt.getTime() > now.getTime(),
        (upload) => claim(upload, now)
      ))
    ),
  claimStoredObject: ({ id, now }: Parameters<Repo["claimStoredObject"]>[0]) =>
    Effect.sync(() =>
      Option.flatMap(
        moveIf(state, (upload) => upload.id === id, (upload) => upload.status === "pending" && upload.blobKey !== null, (upload) => claim(upload, now)),
        (upload) => upload.blobKey === null ? Option.none() : Option.some({ id: upload.id, prediction_id: upload.predictionId, blob_key: upload.blobKey })
      )
    ),
  landUpload: (landing: Parameters<Repo["landUpload"]>[0]) =>
    Effect.sync(() =>
      Option.isSome(moveIf(state, (upload) => upload.id === landing.id, (upload) => upload.status === "receiving", (upload) => {
        upload.status = "received"
        upload.sizeBytes = landing.sizeBytes
        upload.mediaKind = landing.kind
        upload.receivedAt = landing.now
        upload.blobKey = landing.blobKey
      }))
    ),
  releaseClaim: (id: string) =>
    Effect.sync(() =>
      void moveIf(state, (upload) => upload.id === id, (upload) => upload.status === "receiving", (upload) => {
        upload.status = "pending"
        upload.receivingStartedAt = null
      })
    )
})

const sweepStatements = (state: MemoryPredictionsState) => {
  const withStatus = (status: MemoryUploadStatus) => [...state.uploads.values()].filter((upload) => upload.status === status)
  return {
    findLinksDue: ({ before, limit }: Parameters<Repo["findLinksDue"]>[0]) =>
      Effect.sync(() =>
        withStatus("pending")
          .filter((upload) => atOrBefore(upload.expiresAt, before))
          .sort(byExpiry)
          .slice(0, limit)
          .map((upload) => ({ id: upload.id, blob_key: upload.blobKey }))
      ),
    expireLink: ({ id, now }: Parameters<Repo["expireLink"]>[0]) =>
      Effect.sync(() =>
        Option.map(
          moveIf(state, (upload) => upload.id === id, (upload) => upload.status === "pending" && atOrBefore(upload.expiresAt, now), (upload) => {
            upload.status = "expired"
          }),
          (upload) => ({ prediction_id: upload.predictionId })
        )
      ),
    findStalledReceives: ({ before, limit }: Parameters<Repo["findStalledReceives"]>[0]) =>
      Effect.sync(() =>
        withStatus("receiving")
          .filter((upload) => atOrBefore(upload.receivingStartedAt, before))
          .slice(0, limit)
          .map((upload) => ({ id: upload.id, prediction_id: upload.predictionId, blob_key: upload.blobKey }))
      ),
    /** receiving → pending, or expired when its time is up. */
    releaseStalledReceive: ({ id, now, startedBefore }: Parameters<Repo["releaseStalledReceive"]>[0]) =>
      Effect.sync(() =>
        Option.map(
          moveIf(
            state,
            (upload) => upload.id === id,
            (upload) => upload.status === "receiving" && atOrBefore(upload.receivingStartedAt, startedBefore),
            (upload) => {
              upload.status = upload.expiresAt.getTime() > now.getTime() ? "pending" : "expired"
              upload.receivingStartedAt = null
            }
          ),
          (upload) => ({ status: upload.status, prediction_id: upload.predictionId })
        )
      )
  }
}

const fileStatements = (state: MemoryPredictionsState) => {
  const isTerminal = (predictionId: string) => {
    const status = state.predictions.get(predictionId)?.status
    return status === "succeeded" || status === "failed"
  }
  /** Uploads still holding a file whose job is terminal. */
  const storedOfTerminal = () =>
    [...state.uploads.values()].flatMap((upload) =>
      upload.blobKey !== null && isTerminal(upload.predictionId) ? [{ upload, blobKey: upload.blobKey }] : []
    )

  return {
    findTerminalFiles: (predictionId: string) =>
      Effect.sync(() =>
        storedOfTerminal()
          .filter(({ upload }) => upload.predictionId === predictionId)
          .map(({ blobKey, upload }) => ({ id: upload.id, blob_key: blobKey }))
      ),
    forgetFile: ({ blobKey, id }: Parameters<Repo["forgetFile"]>[0]) =>
      Effect.sync(() => {
        const upload = state.uploads.get(id)
        if (upload !== undefined && upload.blobKey === blobKey) upload.blobKey = null
      }),
    findLeftoverFiles: (limit: number) =>
      Effect.sync(() => storedOfTerminal().slice(0, limit).map(({ upload }) => ({ prediction_id: upload.predictionId }))),
    findByIds: (ids: ReadonlyArray<string>) =>
      Effect.sync(() =>
        [...state.uploads.values()]
          .filter((upload) => ids.includes(upload.id))
          .map((upload) => ({ id: upload.id, status: upload.status, blob_key: upload.blobKey }))
      )
  }
}

const quotaStatements = (state: MemoryPredictionsState) => ({
  /** The key's unused, unexpired links, and seconds until the oldest expires (0 when none). */
  pendingLinks: ({ keyId, now }: Parameters<Repo["pendingLinks"]>[0]) =>
    Effect.sync(() => {
      const links = [...state.uploads.values()].filter((upload) =>
        upload.keyId === keyId && upload.status === "pending" && upload.expiresAt.getTime() > now.getTime()
      )
      const oldest = Math.min(...links.map((upload) => upload.expiresAt.getTime()))
      return { links: links.length, freesInSec: links.length === 0 ? 0 : (oldest - now.getTime()) / 1000 }
    }),
  /** The account's landed, unpaid clips, and seconds until the oldest is expired (0 when none). */
  unpaidClips: ({ accountId, now, retentionSec }: Parameters<Repo["unpaidClips"]>[0]) =>
    Effect.sync(() => {
      const clips = [...state.uploads.values()].filter((upload) => {
        const prediction = state.predictions.get(upload.predictionId)
        return prediction?.accountId === accountId && prediction.status === "awaiting_upload" && upload.status === "received"
      })
      const received = clips.flatMap((upload) => (upload.receivedAt === null ? [] : [upload.receivedAt.getTime()]))
      return {
        clips: clips.length,
        bytes: clips.reduce((total, upload) => total + (upload.sizeBytes ?? 0), 0),
        freesInSec: received.length === 0 ? 0 : (Math.min(...received) + retentionSec * 1000 - now.getTime()) / 1000
      }
    }),
  lockKeyLinks: (keyId: string) => Effect.sync(() => void state.advisoryLocks.push({ lock: "keyLinks", id: keyId })),
  lockUnpaidClips: (accountId: string) => Effect.sync(() => void state.advisoryLocks.push({ lock: "unpaidClips", id: accountId }))
})

/**
 * An UploadsRepo over `seed` (a fresh, empty state when not given; JobsRepoMemory's state to
 * share its tables): its layer, and the state for a test to seed and read.
 */
export const makeUploadsRepoInMemory = (seed?: MemoryPredictionsState) => {
  const state = seed ?? emptyPredictionsState()
  const repo: Repo = {
    ...linkStatements(state),
    ...landingStatements(state),
    ...sweepStatements(state),
    ...fileStatements(state),
    ...quotaStatements(state)
  }
  return { layer: Layer.succeed(UploadsRepo, repo), state }
}
