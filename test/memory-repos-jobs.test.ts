/**
 * The in-memory JobsRepo, UploadsRepo and WebhooksRepo (src/Predictions/JobsRepoMemory.ts,
 * src/Predictions/UploadsRepoMemory.ts, src/Webhooks/RepoMemory.ts):
 *
 * - a contract suite: the same cases against the PostgreSQL repositories and the memory ones,
 *   asserting what the services rely on (rows found, wrong transitions refused, order, paging,
 *   counts), so the fakes stay honest;
 * - the services that own these repositories (PredictionJobs, PredictionUploads, Webhooks and
 *   the Dispatcher) over the memory layers with no database, time from TestClock.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test"
import { ConfigProvider, Duration, Effect, Exit, Layer, ManagedRuntime, Option, Redacted, References, Result, Stream } from "effect"
import { TestClock } from "effect/testing"
import { randomBytes } from "node:crypto"
import { join } from "node:path"
import { tempDir } from "./support/tempDirs.js"
import type Pg from "pg"
import type { Caller } from "../src/Auth/Api.js"
import { Secrets } from "../src/Config.js"
import { UnpaidClipsLimit } from "../src/Errors.js"
import { newId, sha256Hex } from "../src/Ids.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { makeLedgerRepoInMemory } from "../src/Ledger/RepoMemory.js"
import { BlobStore } from "../src/Predictions/BlobStore.js"
import { PredictionJobs } from "../src/Predictions/Jobs.js"
import { JobsRepo } from "../src/Predictions/JobsRepo.js"
import { makeJobsRepoInMemory } from "../src/Predictions/JobsRepoMemory.js"
import type { FinishGuard } from "../src/Predictions/Rows.js"
import { emptyPredictionsState } from "../src/Predictions/TablesMemory.js"
import { UploadQuotas } from "../src/Predictions/Quotas.js"
import type { ClipScore } from "../src/Predictions/Scorer.js"
import { PredictionUploads } from "../src/Predictions/Uploads.js"
import { UploadsRepo } from "../src/Predictions/UploadsRepo.js"
import { makeUploadsRepoInMemory } from "../src/Predictions/UploadsRepoMemory.js"
import { WorkSignal } from "../src/Predictions/WorkSignal.js"
import { currentDate } from "../src/Repository.js"
import { DatabaseMode, SqlLive } from "../src/Sql.js"
import { Dispatcher } from "../src/Webhooks/Dispatcher.js"
import { WebhooksRepo } from "../src/Webhooks/Repo.js"
import { makeWebhooksRepoInMemory } from "../src/Webhooks/RepoMemory.js"
import { type PostResult, type WebhookRequest, WebhookTransport } from "../src/Webhooks/Transport.js"
import { Webhooks } from "../src/Webhooks/Webhooks.js"
import { cloneStates, memoryTransactions } from "./support/memoryTransactions.js"
import { createDatabase, dropDatabase, testPool } from "./support/server.js"

// ---------------------------------------------------------------------------------------------
// The contract: the same cases on PostgreSQL and in memory

type Repos = JobsRepo | UploadsRepo | WebhooksRepo

/** An account and a live key of it. */
interface Owner {
  readonly accountId: string
  readonly keyId: string
}

interface Backend {
  readonly name: string
  readonly start: () => Promise<void>
  readonly stop: () => Promise<void>
  /** Empty tables before each case. */
  readonly reset: () => Promise<void>
  readonly run: <A>(effect: Effect.Effect<A, never, Repos>) => Promise<A>
  readonly owner: () => Promise<Owner>
  /** A hold a job may reference (predictions.hold_id is a foreign key on PostgreSQL). */
  readonly hold: (owner: Owner) => Promise<string>
  readonly revokeKey: (owner: Owner) => Promise<void>
  readonly suspend: (owner: Owner) => Promise<void>
  /** The attempt rows of a delivery, in the order written. */
  readonly attemptsOf: (deliveryId: string) => Promise<Array<{ attempt: number; status_code: number | null }>>
}

const newOwner = (): Owner => ({ accountId: newId("acct"), keyId: newId("key") })

const postgresBackend = (): Backend => {
  const started: { url?: string; runtime?: ManagedRuntime.ManagedRuntime<Repos, unknown>; db?: Pg.Pool } = {}
  const ready = <A>(value: A | undefined): A => {
    if (value === undefined) throw new Error("the PostgreSQL backend is used before it started")
    return value
  }
  const query = (text: string, values: ReadonlyArray<unknown>) => ready(started.db).query(text, [...values])
  return {
    name: "PostgreSQL",
    start: async () => {
      started.url = await createDatabase()
      const provider = ConfigProvider.fromEnv({
        env: { DATABASE_URL: started.url, DATA_DIR: tempDir("hookline-memory-contract-") }
      })
      started.runtime = ManagedRuntime.make(Layer.mergeAll(JobsRepo.layer, UploadsRepo.layer, WebhooksRepo.layer).pipe(
        Layer.provide(SqlLive),
        Layer.provideMerge(Layer.succeed(References.MinimumLogLevel, "Warn")),
        Layer.provide(ConfigProvider.layer(provider))
      ))
      await started.runtime.runPromise(Effect.void)
      started.db = testPool(started.url, 2)
    },
    stop: async () => {
      await started.runtime?.dispose()
      await started.db?.end()
      if (started.url !== undefined) await dropDatabase(started.url)
    },
    reset: async () => {
      await query("TRUNCATE accounts CASCADE", [])
    },
    run: (effect) => ready(started.runtime).runPromise(effect),
    owner: async () => {
      const owner = newOwner()
      await query("INSERT INTO accounts (id, plan) VALUES ($1, 'pro')", [owner.accountId])
      await query("INSERT INTO api_keys (id, account_id, key_hash, scopes) VALUES ($1, $2, $3, '{}')", [
        owner.keyId,
        owner.accountId,
        sha256Hex(owner.keyId)
      ])
      return owner
    },
    hold: async (owner) => {
      const holdId = newId("hold")
      await query("INSERT INTO holds (id, account_id, monthly_amount, topup_amount, operation) VALUES ($1, $2, 0, 20, 'prediction')", [
        holdId,
        owner.accountId
      ])
      return holdId
    },
    revokeKey: async (owner) => {
      await query("UPDATE api_keys SET revoked_at = now() WHERE id = $1", [owner.keyId])
    },
    suspend: async (owner) => {
      await query("UPDATE accounts SET suspended = true WHERE id = $1", [owner.accountId])
    },
    attemptsOf: async (deliveryId) =>
      (await query("SELECT attempt, status_code FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id", [deliveryId])).rows
  }
}

const memoryRepos = () => {
  const jobs = makeJobsRepoInMemory()
  const uploads = makeUploadsRepoInMemory(jobs.state)
  const webhooks = makeWebhooksRepoInMemory()
  return { predictions: jobs.state, webhooks: webhooks.state, layer: Layer.mergeAll(jobs.layer, uploads.layer, webhooks.layer) }
}

const memoryBackend = (): Backend => {
  let repos = memoryRepos()
  return {
    name: "memory",
    start: async () => {},
    stop: async () => {},
    reset: async () => {
      repos = memoryRepos()
    },
    run: (effect) => Effect.runPromise(Effect.provide(effect, repos.layer)),
    owner: async () => {
      const owner = newOwner()
      repos.predictions.accounts.set(owner.accountId, { suspended: false })
      repos.predictions.apiKeys.set(owner.keyId, { accountId: owner.accountId, revoked: false })
      return owner
    },
    hold: async () => newId("hold"),
    revokeKey: async (owner) => {
      repos.predictions.apiKeys.set(owner.keyId, { accountId: owner.accountId, revoked: true })
    },
    suspend: async (owner) => {
      repos.predictions.accounts.set(owner.accountId, { suspended: true })
    },
    attemptsOf: async (deliveryId) =>
      repos.webhooks.attempts
        .filter((attempt) => attempt.deliveryId === deliveryId)
        .map((attempt) => ({ attempt: attempt.attempt, status_code: attempt.statusCode }))
  }
}

const t0 = Date.UTC(2026, 0, 15, 12)
/** `seconds` after the contract's epoch. */
const at = (seconds: number) => new Date(t0 + seconds * 1000)
const hour = 3_600

interface Link extends Owner {
  readonly predictionId: string
  readonly uploadId: string
  readonly tokenHash: string
}

/** A link of `owner` (its job awaiting_upload), created and expiring at the given seconds. */
const createLink = (owner: Owner, times: { readonly created?: number; readonly expires?: number } = {}) =>
  Effect.gen(function*() {
    const uploads = yield* UploadsRepo
    const uploadId = newId("upl")
    const link: Link = { ...owner, predictionId: newId("pred"), uploadId, tokenHash: sha256Hex(uploadId) }
    yield* uploads.createUploadLink({
      ...link,
      blobKey: `uploads/${uploadId}`,
      now: at(times.created ?? 0),
      expiresAt: at(times.expires ?? 900)
    })
    return link
  })

/** Runs `body` on `backend` with a link of a new owner. */
const withLink = async <A>(backend: Backend, body: (link: Link) => Effect.Effect<A, never, Repos>) =>
  backend.run(Effect.flatMap(createLink(await backend.owner()), body))

/** Runs `body` on `backend` with a link of a new owner and a hold of that owner for its job. */
const withHeldLink = async <A>(backend: Backend, body: (link: Link, holdId: string) => Effect.Effect<A, never, Repos>) => {
  const owner = await backend.owner()
  const holdId = await backend.hold(owner)
  return backend.run(Effect.flatMap(createLink(owner), (link) => body(link, holdId)))
}

/** The PUT: claimed and landed at `second`, the file under the job's key. */
const land = (link: Link, second: number, sizeBytes = 1_000) =>
  Effect.gen(function*() {
    const uploads = yield* UploadsRepo
    expect(yield* uploads.claimByToken({ tokenHash: link.tokenHash, now: at(second) })).toBe(true)
    expect(yield* uploads.landUpload({ id: link.uploadId, sizeBytes, kind: "mp4", blobKey: `jobs/${link.predictionId}`, now: at(second) }))
      .toBe(true)
  })

const queue = (link: Link, holdId: string, second: number) =>
  Effect.flatMap(JobsRepo, (jobs) => jobs.queueJob({ id: link.predictionId, holdId, traceParent: null, now: at(second) }))

/** A worker's claim at `second`, for jobs queued within the hour before it. */
const claim = (workerId: string, second: number) =>
  Effect.flatMap(JobsRepo, (jobs) => jobs.claimNextJob({ workerId, now: at(second), queuedAfter: at(second - hour) }))

const succeeded = (id: string, guard: FinishGuard, second: number) => ({
  id,
  status: "succeeded" as const,
  result: JSON.stringify({ band: "high", hook_duration_sec: 1.5, category: { slug: "food-cooking" }, features: { cuts: 3 } }),
  errorType: null,
  errorMessage: null,
  durationSec: 12.5,
  now: at(second),
  guard
})

const failed = (id: string, guard: FinishGuard, second: number) => ({
  id,
  status: "failed" as const,
  result: null,
  errorType: "expired",
  errorMessage: "It waited too long.",
  durationSec: null,
  now: at(second),
  guard
})

const idsOf = (rows: ReadonlyArray<{ readonly id: string }>) => rows.map((row) => row.id)

const jobCases = (backend: Backend) => {
  test("a new link: its job awaiting_upload, visible to its own key only while created after the bound", async () => {
    const owner = await backend.owner()
    const stranger = await backend.owner()
    await backend.run(Effect.gen(function*() {
      const jobs = yield* JobsRepo
      const link = yield* createLink(owner)
      const row = Option.getOrThrow(yield* jobs.findPrediction(link.predictionId))
      expect(row).toMatchObject({
        id: link.predictionId,
        account_id: owner.accountId,
        status: "awaiting_upload",
        hold_id: null,
        input_duration_sec: null,
        result: null,
        error_type: null,
        completed_at: null,
        upload_id: link.uploadId,
        upload_status: "pending"
      })
      expect(row.created_at.getTime()).toBe(at(0).getTime())
      const visible = (keyId: string, createdAfter: number) =>
        Effect.map(jobs.findVisiblePrediction({ id: link.predictionId, keyId, createdAfter: at(createdAfter) }), Option.isSome)
      expect(yield* visible(owner.keyId, -1)).toBe(true)
      expect(yield* visible(stranger.keyId, -1)).toBe(false)
      // Created at the bound itself: no longer visible (created_at > bound).
      expect(yield* visible(owner.keyId, 0)).toBe(false)
      expect(Option.isNone(yield* jobs.findPrediction(newId("pred")))).toBe(true)
    }))
  })

  test("a link takes one PUT: claimed once, released back to pending, landed once", async () => {
    await withLink(backend, (link) => Effect.gen(function*() {
      const uploads = yield* UploadsRepo
      const jobs = yield* JobsRepo
      const byToken = (second: number) => Effect.map(uploads.findByToken({ tokenHash: link.tokenHash, now: at(second) }), Option.getOrThrow)
      expect(yield* byToken(1)).toEqual({
        id: link.uploadId,
        prediction_id: link.predictionId,
        account_id: link.accountId,
        status: "pending",
        blob_key: `uploads/${link.uploadId}`,
        expired: false
      })
      expect(yield* uploads.claimByToken({ tokenHash: link.tokenHash, now: at(1) })).toBe(true)
      expect(yield* uploads.claimByToken({ tokenHash: link.tokenHash, now: at(1) })).toBe(false)
      expect((yield* byToken(2)).status).toBe("receiving")
      yield* uploads.releaseClaim(link.uploadId)
      expect((yield* byToken(2)).status).toBe("pending")
      // Landing needs a claim: a pending link does not land.
      const landing = { id: link.uploadId, sizeBytes: 1_000, kind: "mp4", blobKey: `jobs/${link.predictionId}`, now: at(3) }
      expect(yield* uploads.landUpload(landing)).toBe(false)
      expect(yield* uploads.claimByToken({ tokenHash: link.tokenHash, now: at(3) })).toBe(true)
      expect(yield* uploads.landUpload(landing)).toBe(true)
      expect(yield* uploads.landUpload(landing)).toBe(false)
      // A landed upload is not released any more.
      yield* uploads.releaseClaim(link.uploadId)
      expect(yield* byToken(4)).toMatchObject({ status: "received", blob_key: `jobs/${link.predictionId}` })
      expect(Option.isNone(yield* uploads.findByToken({ tokenHash: sha256Hex("unknown"), now: at(4) }))).toBe(true)
      const retry = (keyId: string, createdAfter: number) =>
        jobs.lockForRetryStart({ uploadId: link.uploadId, keyId, createdAfter: at(createdAfter) })
      expect(Option.getOrThrow(yield* retry(link.keyId, -1))).toEqual({
        prediction_id: link.predictionId,
        status: "awaiting_upload",
        upload_status: "received"
      })
      expect(Option.isNone(yield* retry(newId("key"), -1))).toBe(true)
      expect(Option.isNone(yield* retry(link.keyId, 0))).toBe(true)
    }))
  })

  test("a link is dead once it expires, its key is revoked or its account suspended", async () => {
    const [timed, revoked, suspended] = [await backend.owner(), await backend.owner(), await backend.owner()]
    const links = await backend.run(Effect.all([createLink(timed, { expires: 100 }), createLink(revoked), createLink(suspended)]))
    await backend.revokeKey(revoked)
    await backend.suspend(suspended)
    await backend.run(Effect.gen(function*() {
      const uploads = yield* UploadsRepo
      const jobs = yield* JobsRepo
      const expired = (link: Link, second: number) =>
        Effect.map(uploads.findByToken({ tokenHash: link.tokenHash, now: at(second) }), (row) => Option.getOrThrow(row).expired)
      expect(yield* expired(links[0], 99)).toBe(false)
      expect(yield* expired(links[0], 100)).toBe(true)
      expect(yield* uploads.claimByToken({ tokenHash: links[0].tokenHash, now: at(100) })).toBe(false)
      expect(yield* expired(links[1], 1)).toBe(true)
      expect(yield* expired(links[2], 1)).toBe(true)
      // Landing locks the job only while its key is live and its account not suspended.
      expect(Option.getOrThrow(yield* jobs.lockForLanding(links[0].predictionId))).toEqual({
        status: "awaiting_upload",
        account_id: timed.accountId,
        key_id: timed.keyId
      })
      expect(Option.isNone(yield* jobs.lockForLanding(links[1].predictionId))).toBe(true)
      expect(Option.isNone(yield* jobs.lockForLanding(links[2].predictionId))).toBe(true)
    }))
  })

  test("the job's transitions refuse a job in the wrong state", async () => {
    await withHeldLink(backend, (link, holdId) => Effect.gen(function*() {
      const jobs = yield* JobsRepo
      const id = link.predictionId
      const held = (workerId: string, second: number) => ({ id, workerId, now: at(second) })
      expect(yield* jobs.heartbeat(held("w1", 1))).toBe(false)
      expect(yield* jobs.handBack(held("w1", 1))).toBe(false)
      yield* land(link, 1)
      expect(yield* jobs.queueJob({ id, holdId, traceParent: "00-trace-span-01", now: at(2) })).toBe(true)
      expect(yield* jobs.queueJob({ id, holdId, traceParent: null, now: at(3) })).toBe(false)
      expect(yield* jobs.heartbeat(held("w1", 3))).toBe(false)
      expect(Option.getOrThrow(yield* claim("w1", 4))).toEqual({ id, attempts: 1, blob_key: `jobs/${id}`, trace_parent: "00-trace-span-01" })
      expect(yield* jobs.heartbeat(held("w2", 5))).toBe(false)
      expect(yield* jobs.heartbeat(held("w1", 5))).toBe(true)
      expect(yield* jobs.handBack(held("w2", 6))).toBe(false)
      expect(yield* jobs.handBack(held("w1", 6))).toBe(true)
      // Handed back: the attempt is not counted.
      expect(Option.getOrThrow(yield* claim("w2", 7)).attempts).toBe(1)
      expect(Option.isNone(yield* jobs.finishJob(succeeded(id, { _tag: "HeldBy", workerId: "w1" }, 8)))).toBe(true)
      expect(Option.getOrThrow(yield* jobs.finishJob(succeeded(id, { _tag: "HeldBy", workerId: "w2" }, 9)))).toEqual({
        hold_id: holdId,
        account_id: link.accountId
      })
      // Terminal: nothing moves it again.
      const guards: ReadonlyArray<FinishGuard> = [
        { _tag: "HeldBy", workerId: "w2" },
        { _tag: "AwaitingUpload" },
        { _tag: "QueuedBefore", queuedBefore: at(100) },
        { _tag: "StalledOut", heartbeatBefore: at(100), maxAttempts: 0 },
        { _tag: "UnpaidBefore", receivedBefore: at(100) }
      ]
      for (const guard of guards) expect(Option.isNone(yield* jobs.finishJob(failed(id, guard, 10)))).toBe(true)
      expect(yield* jobs.queueJob({ id, holdId, traceParent: null, now: at(10) })).toBe(false)
      expect(yield* jobs.requeueStalled({ id, heartbeatBefore: at(100), maxAttempts: 10, now: at(10) })).toBe(false)
      const row = Option.getOrThrow(yield* jobs.findPrediction(id))
      expect(row).toMatchObject({ status: "succeeded", hold_id: holdId, input_duration_sec: 12.5, error_type: null, upload_status: "received" })
      expect(row.result).toMatchObject({ band: "high", hook_duration_sec: 1.5, category: { slug: "food-cooking" } })
      expect(row.completed_at?.getTime()).toBe(at(9).getTime())
    }))
  })

  test("a claim is fair across accounts: the account with fewer jobs running first, then the oldest; too old is skipped", async () => {
    const [a, b, c] = [await backend.owner(), await backend.owner(), await backend.owner()]
    const holds = [await backend.hold(a), await backend.hold(a), await backend.hold(b), await backend.hold(c)]
    await backend.run(Effect.gen(function*() {
      const jobs = yield* JobsRepo
      const [a1, a2, b1] = [yield* createLink(a), yield* createLink(a), yield* createLink(b)]
      const old = yield* createLink(c, { created: -3 * hour })
      for (const [link, second] of [[a1, 10], [a2, 20], [b1, 30]] as const) yield* land(link, second)
      yield* land(old, -2 * hour)
      yield* queue(a1, holds[0], 10)
      yield* queue(a2, holds[1], 20)
      yield* queue(b1, holds[2], 30)
      yield* queue(old, holds[3], -2 * hour)
      const next = (workerId: string) => Effect.map(claim(workerId, 40), Option.map((job) => job.id))
      expect(yield* next("w1")).toEqual(Option.some(a1.predictionId))
      // a has one running now, b none: b's newer job goes first.
      expect(yield* next("w2")).toEqual(Option.some(b1.predictionId))
      expect(yield* next("w3")).toEqual(Option.some(a2.predictionId))
      // Queued more than the hour before: left to the sweeper.
      expect(Option.isNone(yield* next("w4"))).toBe(true)
      expect(idsOf(yield* jobs.findQueuedBefore({ before: at(40 - hour), limit: 10 }))).toEqual([old.predictionId])
    }))
  })

  test("a stalled job is re-queued while it has attempts left; after the last only the StalledOut finish takes it", async () => {
    await withHeldLink(backend, (link, holdId) => Effect.gen(function*() {
      const jobs = yield* JobsRepo
      const id = link.predictionId
      yield* land(link, 0)
      yield* queue(link, holdId, 0)
      yield* claim("w1", 0)
      expect(idsOf(yield* jobs.findStalled({ before: at(-1), limit: 10 }))).toEqual([])
      expect(idsOf(yield* jobs.findStalled({ before: at(0), limit: 10 }))).toEqual([id])
      expect(yield* jobs.requeueStalled({ id, heartbeatBefore: at(-1), maxAttempts: 3, now: at(31) })).toBe(false)
      expect(yield* jobs.requeueStalled({ id, heartbeatBefore: at(0), maxAttempts: 1, now: at(31) })).toBe(false)
      const stalledOut = (heartbeatBefore: number) => ({ _tag: "StalledOut", heartbeatBefore: at(heartbeatBefore), maxAttempts: 2 }) as const
      expect(Option.isNone(yield* jobs.finishJob(failed(id, stalledOut(0), 31)))).toBe(true)
      expect(yield* jobs.requeueStalled({ id, heartbeatBefore: at(0), maxAttempts: 2, now: at(31) })).toBe(true)
      // The worker that lost it can neither beat nor finish it.
      expect(yield* jobs.heartbeat({ id, workerId: "w1", now: at(32) })).toBe(false)
      expect(Option.isNone(yield* jobs.finishJob(succeeded(id, { _tag: "HeldBy", workerId: "w1" }, 32)))).toBe(true)
      expect(Option.getOrThrow(yield* claim("w2", 33)).attempts).toBe(2)
      expect(Option.isNone(yield* jobs.finishJob(failed(id, stalledOut(32), 70)))).toBe(true)
      expect(Option.isSome(yield* jobs.finishJob(failed(id, stalledOut(33), 70)))).toBe(true)
      expect(Option.getOrThrow(yield* jobs.findPrediction(id))).toMatchObject({ status: "failed", error_type: "expired" })
    }))
  })

  test("the sweeper's finishes: queued too long, landed unpaid too long, a link never used", async () => {
    const owner = await backend.owner()
    const holds = [await backend.hold(owner), await backend.hold(owner), await backend.hold(owner)]
    await backend.run(Effect.gen(function*() {
      const jobs = yield* JobsRepo
      const [qa, qb, qc, unpaid, unused] = [
        yield* createLink(owner),
        yield* createLink(owner),
        yield* createLink(owner),
        yield* createLink(owner),
        yield* createLink(owner)
      ]
      for (const [link, second, hold] of [[qa, 10, holds[0]], [qc, 12, holds[2]], [qb, 11, holds[1]]] as const) {
        yield* land(link, second)
        yield* queue(link, hold, second)
      }
      yield* land(unpaid, 20)
      expect(idsOf(yield* jobs.findQueuedBefore({ before: at(11), limit: 10 }))).toEqual([qa.predictionId, qb.predictionId])
      expect(idsOf(yield* jobs.findQueuedBefore({ before: at(12), limit: 1 }))).toEqual([qa.predictionId])
      const queuedBefore = (second: number) => ({ _tag: "QueuedBefore", queuedBefore: at(second) }) as const
      expect(Option.isNone(yield* jobs.finishJob(failed(qa.predictionId, queuedBefore(9), 50)))).toBe(true)
      expect(Option.getOrThrow(yield* jobs.finishJob(failed(qa.predictionId, queuedBefore(10), 50)))).toEqual({
        hold_id: holds[0],
        account_id: owner.accountId
      })
      expect(idsOf(yield* jobs.findUnpaidBefore({ before: at(19), limit: 10 }))).toEqual([])
      expect(idsOf(yield* jobs.findUnpaidBefore({ before: at(20), limit: 10 }))).toEqual([unpaid.predictionId])
      const unpaidBefore = (second: number) => ({ _tag: "UnpaidBefore", receivedBefore: at(second) }) as const
      expect(Option.isNone(yield* jobs.finishJob(failed(unpaid.predictionId, unpaidBefore(19), 50)))).toBe(true)
      expect(Option.getOrThrow(yield* jobs.finishJob(failed(unpaid.predictionId, unpaidBefore(20), 50)))).toEqual({
        hold_id: null,
        account_id: owner.accountId
      })
      // A link never used has no landed file: only the AwaitingUpload finish takes it, not a queued job.
      expect(Option.isNone(yield* jobs.finishJob(failed(unused.predictionId, unpaidBefore(100), 50)))).toBe(true)
      expect(Option.isNone(yield* jobs.finishJob(failed(qb.predictionId, { _tag: "AwaitingUpload" }, 50)))).toBe(true)
      expect(Option.isSome(yield* jobs.finishJob(failed(unused.predictionId, { _tag: "AwaitingUpload" }, 50)))).toBe(true)
    }))
  })

  test("the gauges: jobs per state and the age of the oldest queued one", async () => {
    const owner = await backend.owner()
    const holds = [await backend.hold(owner), await backend.hold(owner), await backend.hold(owner)]
    await backend.run(Effect.gen(function*() {
      const jobs = yield* JobsRepo
      expect(yield* jobs.oldestQueuedSeconds(at(100))).toBe(0)
      const [running, first, later, done] = [yield* createLink(owner), yield* createLink(owner), yield* createLink(owner), yield* createLink(owner)]
      yield* createLink(owner)
      for (const [link, second, hold] of [[running, 5, holds[0]], [first, 10, holds[1]], [later, 20, holds[2]]] as const) {
        yield* land(link, second)
        yield* queue(link, hold, second)
      }
      yield* claim("w1", 30)
      yield* jobs.finishJob(succeeded(done.predictionId, { _tag: "AwaitingUpload" }, 30))
      const counts = [...(yield* jobs.countByStatus())].sort((x, y) => x.status.localeCompare(y.status))
      expect(counts).toEqual([
        { status: "awaiting_upload", n: 1 },
        { status: "queued", n: 2 },
        { status: "running", n: 1 },
        { status: "succeeded", n: 1 }
      ])
      expect(yield* jobs.oldestQueuedSeconds(at(70.5))).toBeCloseTo(60.5, 6)
    }))
  })
}

const uploadCases = (backend: Backend) => {
  test("link sweeps: due links soonest first; expiry refuses a live or used link; a stalled PUT is released or expired", async () => {
    const owner = await backend.owner()
    await backend.run(Effect.gen(function*() {
      const uploads = yield* UploadsRepo
      const [l100, l50, l200] = [
        yield* createLink(owner, { expires: 100 }),
        yield* createLink(owner, { expires: 50 }),
        yield* createLink(owner, { expires: 200 })
      ]
      expect(idsOf(yield* uploads.findLinksDue({ before: at(150), limit: 10 }))).toEqual([l50.uploadId, l100.uploadId])
      expect(yield* uploads.findLinksDue({ before: at(150), limit: 1 })).toEqual([{ id: l50.uploadId, blob_key: `uploads/${l50.uploadId}` }])
      expect(Option.isNone(yield* uploads.expireLink({ id: l100.uploadId, now: at(99) }))).toBe(true)
      expect(Option.getOrThrow(yield* uploads.expireLink({ id: l100.uploadId, now: at(100) }))).toEqual({ prediction_id: l100.predictionId })
      expect(Option.isNone(yield* uploads.expireLink({ id: l100.uploadId, now: at(101) }))).toBe(true)
      expect(yield* uploads.claimByToken({ tokenHash: l200.tokenHash, now: at(10) })).toBe(true)
      expect(Option.isNone(yield* uploads.expireLink({ id: l200.uploadId, now: at(300) }))).toBe(true)
      expect(yield* uploads.findStalledReceives({ before: at(9), limit: 10 })).toEqual([])
      expect(yield* uploads.findStalledReceives({ before: at(10), limit: 10 })).toEqual([
        { id: l200.uploadId, prediction_id: l200.predictionId, blob_key: `uploads/${l200.uploadId}` }
      ])
      const release = (startedBefore: number, now: number) =>
        uploads.releaseStalledReceive({ id: l200.uploadId, startedBefore: at(startedBefore), now: at(now) })
      expect(Option.isNone(yield* release(9, 150))).toBe(true)
      expect(Option.getOrThrow(yield* release(10, 150))).toEqual({ status: "pending", prediction_id: l200.predictionId })
      expect(yield* uploads.claimByToken({ tokenHash: l200.tokenHash, now: at(160) })).toBe(true)
      // Released when its time is up: expired, not pending.
      expect(Option.getOrThrow(yield* release(160, 200))).toEqual({ status: "expired", prediction_id: l200.predictionId })
      expect(yield* uploads.findByIds([l200.uploadId, l50.uploadId, newId("upl")]).pipe(Effect.map((rows) => [...rows].sort((x, y) => x.id.localeCompare(y.id)))))
        .toEqual([
          { id: l200.uploadId, status: "expired" as const, blob_key: `uploads/${l200.uploadId}` },
          { id: l50.uploadId, status: "pending" as const, blob_key: `uploads/${l50.uploadId}` }
        ].sort((x, y) => x.id.localeCompare(y.id)))
    }))
  })

  test("a presigned object is claimed once, and only while its link is pending", async () => {
    await withLink(backend, (link) => Effect.gen(function*() {
      const uploads = yield* UploadsRepo
      expect(Option.getOrThrow(yield* uploads.claimStoredObject({ id: link.uploadId, now: at(5) }))).toEqual({
        id: link.uploadId,
        prediction_id: link.predictionId,
        blob_key: `uploads/${link.uploadId}`
      })
      expect(Option.isNone(yield* uploads.claimStoredObject({ id: link.uploadId, now: at(6) }))).toBe(true)
      expect(yield* uploads.findStalledReceives({ before: at(5), limit: 10 })).toHaveLength(1)
    }))
  })

  test("a terminal job's files are listed until forgotten, and only the stored key is forgotten", async () => {
    await withLink(backend, (link) => Effect.gen(function*() {
      const uploads = yield* UploadsRepo
      const jobs = yield* JobsRepo
      yield* land(link, 1)
      const blobKey = `jobs/${link.predictionId}`
      expect(yield* uploads.findTerminalFiles(link.predictionId)).toEqual([])
      expect(yield* uploads.findLeftoverFiles(10)).toEqual([])
      yield* jobs.finishJob(failed(link.predictionId, { _tag: "AwaitingUpload" }, 2))
      expect(yield* uploads.findTerminalFiles(link.predictionId)).toEqual([{ id: link.uploadId, blob_key: blobKey }])
      expect(yield* uploads.findLeftoverFiles(10)).toEqual([{ prediction_id: link.predictionId }])
      yield* uploads.forgetFile({ id: link.uploadId, blobKey: "jobs/another" })
      expect(yield* uploads.findTerminalFiles(link.predictionId)).toHaveLength(1)
      yield* uploads.forgetFile({ id: link.uploadId, blobKey })
      expect(yield* uploads.findTerminalFiles(link.predictionId)).toEqual([])
      expect(yield* uploads.findLeftoverFiles(10)).toEqual([])
    }))
  })

  test("quotas: a key's unused links and an account's unpaid clips, with the time until room comes back", async () => {
    const owner = await backend.owner()
    const holdId = await backend.hold(owner)
    await backend.run(Effect.gen(function*() {
      const uploads = yield* UploadsRepo
      const pending = (second: number) => uploads.pendingLinks({ keyId: owner.keyId, now: at(second) })
      expect(yield* pending(50)).toEqual({ links: 0, freesInSec: 0 })
      yield* createLink(owner, { expires: 300 })
      yield* createLink(owner, { expires: 100 })
      yield* createLink(owner, { expires: 10 })
      const used = yield* createLink(owner, { expires: 400 })
      const paid = yield* createLink(owner, { expires: 400 })
      yield* land(used, 20, 1_000)
      yield* land(paid, 30, 700)
      yield* queue(paid, holdId, 30)
      const also = yield* createLink(owner, { expires: 400 })
      yield* land(also, 40, 500)
      const links = yield* pending(50)
      expect(links.links).toBe(2)
      expect(links.freesInSec).toBeCloseTo(50, 6)
      const unpaid = yield* uploads.unpaidClips({ accountId: owner.accountId, retentionSec: hour, now: at(100) })
      expect(unpaid.clips).toBe(2)
      expect(unpaid.bytes).toBe(1_500)
      expect(unpaid.freesInSec).toBeCloseTo(20 + hour - 100, 6)
      expect(yield* uploads.unpaidClips({ accountId: newId("acct"), retentionSec: hour, now: at(100) })).toEqual({
        clips: 0,
        bytes: 0,
        freesInSec: 0
      })
    }))
  })
}

const enqueue = (accountId: string, second: number, type: "prediction.succeeded" | "prediction.failed" = "prediction.succeeded") =>
  Effect.gen(function*() {
    const repo = yield* WebhooksRepo
    const deliveryId = newId("dlv")
    const eventId = newId("evt")
    const body = JSON.stringify({ id: eventId, object: "event", type, data: { n: second } })
    const queued = yield* repo.enqueueDelivery({ deliveryId, eventId, accountId, type, body, now: at(second) })
    return Option.map(queued, () => ({ deliveryId, eventId, body }))
  })

const createWebhook = (accountId: string, events: ReadonlyArray<"prediction.succeeded" | "prediction.failed"> | null = null) =>
  Effect.flatMap(WebhooksRepo, (repo) => repo.createWebhook({ accountId, url: "https://hooks.example/in", secretCiphertext: "sealed-1", events }))

/** One attempt of the only delivery due: claimed and recorded at `second`. */
const attemptOnce = (accountId: string, second: number, outcome: { readonly statusCode: number; readonly delivered: boolean }) =>
  Effect.gen(function*() {
    const repo = yield* WebhooksRepo
    yield* enqueue(accountId, second)
    const token = newId("req")
    const [row] = yield* repo.claimDueDeliveries({ limit: 10, token, leaseMs: 60_000, now: at(second) })
    yield* repo.recordAttempt({
      deliveryId: row.id,
      accountId,
      token,
      attempt: row.attempts,
      dispatcher: "dsp_contract",
      statusCode: outcome.statusCode,
      durationMs: 12.4,
      error: outcome.delivered ? null : `answered ${outcome.statusCode}`,
      status: outcome.delivered ? "delivered" : "failed",
      delayMs: 0,
      delivered: outcome.delivered,
      gone: outcome.statusCode === 410,
      disableAfterMs: hour * 1000,
      now: at(second)
    })
  })

const webhookCases = (backend: Backend) => {
  test("a webhook is created once, retargeted (its selection kept unless given), switched off", async () => {
    const owner = await backend.owner()
    await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      expect(Option.getOrThrow(yield* createWebhook(owner.accountId, ["prediction.succeeded"]))).toEqual({
        url: "https://hooks.example/in",
        enabled: true,
        events: ["prediction.succeeded"],
        disabled_reason: null,
        disabled_at: null
      })
      expect(Option.isNone(yield* createWebhook(owner.accountId))).toBe(true)
      expect(Option.getOrThrow(yield* repo.findWebhook(owner.accountId))).toMatchObject({
        secret_ciphertext: "sealed-1",
        previous_secret_ciphertext: null
      })
      yield* repo.switchOffWebhook(owner.accountId)
      expect(Option.getOrThrow(yield* repo.findWebhook(owner.accountId)).enabled).toBe(false)
      const kept = yield* repo.retargetWebhook({ accountId: owner.accountId, url: "https://hooks.example/two", events: undefined })
      expect(kept).toMatchObject({ url: "https://hooks.example/two", enabled: true, events: ["prediction.succeeded"] })
      const all = yield* repo.retargetWebhook({ accountId: owner.accountId, url: "https://hooks.example/two", events: null })
      expect(all.events).toBeNull()
      expect(Option.isNone(yield* repo.findWebhook(newId("acct")))).toBe(true)
    }))
  })

  test("a rotation keeps the previous secret for its window only", async () => {
    const owner = await backend.owner()
    await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      expect(Option.isNone(yield* repo.rotateSecret({ accountId: owner.accountId, secretCiphertext: "sealed-2", previousTtlMs: 60_000 })))
        .toBe(true)
      yield* createWebhook(owner.accountId)
      expect(Option.isSome(yield* repo.rotateSecret({ accountId: owner.accountId, secretCiphertext: "sealed-2", previousTtlMs: 60_000 })))
        .toBe(true)
      expect(Option.getOrThrow(yield* repo.findWebhook(owner.accountId))).toMatchObject({
        secret_ciphertext: "sealed-2",
        previous_secret_ciphertext: "sealed-1"
      })
      // A window already over: the previous secret no longer signs.
      yield* repo.rotateSecret({ accountId: owner.accountId, secretCiphertext: "sealed-3", previousTtlMs: -1_000 })
      expect(Option.getOrThrow(yield* repo.findWebhook(owner.accountId))).toMatchObject({
        secret_ciphertext: "sealed-3",
        previous_secret_ciphertext: null
      })
    }))
  })

  test("the outbox: an event is queued only for an enabled webhook that takes it; the log pages newest first", async () => {
    const owner = await backend.owner()
    const other = await backend.owner()
    await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      expect(Option.isNone(yield* enqueue(owner.accountId, 0))).toBe(true)
      yield* createWebhook(owner.accountId, ["prediction.succeeded"])
      expect(Option.isNone(yield* enqueue(owner.accountId, 0, "prediction.failed"))).toBe(true)
      const queued: Array<string> = []
      for (const second of [1, 2, 3, 4, 5]) queued.push(Option.getOrThrow(yield* enqueue(owner.accountId, second)).deliveryId)
      const newestFirst = [...queued].sort().reverse()
      const page = (afterId: string | undefined, limit: number, status?: "pending" | "delivered") =>
        Effect.map(repo.listDeliveries({ accountId: owner.accountId, status, afterId, limit }), idsOf)
      expect(yield* page(undefined, 2)).toEqual(newestFirst.slice(0, 2))
      expect(yield* page(newestFirst[1], 2)).toEqual(newestFirst.slice(2, 4))
      expect(yield* page(newestFirst[3], 2)).toEqual(newestFirst.slice(4))
      expect(yield* page(undefined, 10, "delivered")).toEqual([])
      expect(yield* repo.listDeliveries({ accountId: other.accountId, status: undefined, afterId: undefined, limit: 10 })).toEqual([])
      const row = Option.getOrThrow(yield* repo.findDelivery({ accountId: owner.accountId, id: queued[0] }))
      expect(row).toMatchObject({ id: queued[0], event_type: "prediction.succeeded", status: "pending", attempts: 0, completed_at: null })
      expect(row.next_attempt_at.getTime()).toBe(at(1).getTime())
      expect(Option.isNone(yield* repo.findDelivery({ accountId: other.accountId, id: queued[0] }))).toBe(true)
      const backlog = yield* repo.outboxBacklog(at(3.5))
      expect(backlog.pending).toBe(5)
      expect(backlog.oldest_due_ms).toBeCloseTo(2_500, 3)
      expect((yield* repo.untilNextDue(at(0))).wait_ms).toBeCloseTo(1_000, 3)
      yield* repo.switchOffWebhook(owner.accountId)
      expect(Option.isNone(yield* enqueue(owner.accountId, 6))).toBe(true)
    }))
  })

  test("claims are leased: a due delivery is claimed once, and recorded, dropped or released only under its token", async () => {
    const owner = await backend.owner()
    const ids = await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      yield* createWebhook(owner.accountId)
      const d0 = Option.getOrThrow(yield* enqueue(owner.accountId, 0))
      const d5 = Option.getOrThrow(yield* enqueue(owner.accountId, 5))
      const d100 = Option.getOrThrow(yield* enqueue(owner.accountId, 100))
      const claimed = yield* repo.claimDueDeliveries({ limit: 10, token: "token-1", leaseMs: 60_000, now: at(10) })
      expect([...claimed].sort((x, y) => x.id.localeCompare(y.id))).toEqual([
        { id: d0.deliveryId, event_id: d0.eventId, body: d0.body },
        { id: d5.deliveryId, event_id: d5.eventId, body: d5.body }
      ].sort((x, y) => x.id.localeCompare(y.id)).map((delivery) => ({
        ...delivery,
        account_id: owner.accountId,
        attempts: 1,
        url: "https://hooks.example/in",
        enabled: true,
        secret_ciphertext: "sealed-1",
        previous_secret_ciphertext: null
      })))
      expect(yield* repo.claimDueDeliveries({ limit: 10, token: "token-2", leaseMs: 60_000, now: at(10) })).toEqual([])
      // Leased until 70: the earliest a pending delivery is due again.
      expect((yield* repo.untilNextDue(at(10))).wait_ms).toBeCloseTo(60_000, 3)
      const record = (deliveryId: string, token: string, statusCode: number, status: "pending" | "delivered") =>
        repo.recordAttempt({
          deliveryId,
          accountId: owner.accountId,
          token,
          attempt: 1,
          dispatcher: "dsp_contract",
          statusCode,
          durationMs: 8.6,
          error: status === "delivered" ? null : `answered ${statusCode}`,
          status,
          delayMs: 5_000,
          delivered: status === "delivered",
          gone: false,
          disableAfterMs: hour * 1000,
          now: at(11)
        })
      const find = (id: string) => Effect.map(repo.findDelivery({ accountId: owner.accountId, id }), Option.getOrThrow)
      // A stale token: the attempt is on record, the delivery unchanged.
      yield* record(d0.deliveryId, "token-stale", 500, "pending")
      expect(yield* find(d0.deliveryId)).toMatchObject({ status: "pending", attempts: 1, last_status_code: null })
      yield* record(d0.deliveryId, "token-1", 500, "pending")
      const retrying = yield* find(d0.deliveryId)
      expect(retrying).toMatchObject({ status: "pending", attempts: 1, last_status_code: 500, last_error: "answered 500", completed_at: null })
      expect(retrying.next_attempt_at.getTime()).toBe(at(16).getTime())
      yield* record(d5.deliveryId, "token-1", 204, "delivered")
      expect(yield* find(d5.deliveryId)).toMatchObject({ status: "delivered", last_status_code: 204, completed_at: at(11) })
      // Recorded once: the same token does not record a second outcome.
      yield* record(d5.deliveryId, "token-1", 500, "pending")
      expect((yield* find(d5.deliveryId)).status).toBe("delivered")
      expect(Option.isNone(yield* repo.requeueDelivery({ accountId: owner.accountId, id: d5.deliveryId, now: at(12) }))).toBe(true)
      // d0 claimed again: a retry leaves it to the attempt; a clean shutdown hands it back uncounted.
      const [again] = yield* repo.claimDueDeliveries({ limit: 1, token: "token-3", leaseMs: 60_000, now: at(16) })
      expect(again).toMatchObject({ id: d0.deliveryId, attempts: 2 })
      expect(Option.isNone(yield* repo.requeueDelivery({ accountId: owner.accountId, id: d0.deliveryId, now: at(17) }))).toBe(true)
      yield* repo.releaseClaim({ deliveryId: d0.deliveryId, token: "token-stale", now: at(17) })
      expect((yield* find(d0.deliveryId)).attempts).toBe(2)
      yield* repo.releaseClaim({ deliveryId: d0.deliveryId, token: "token-3", now: at(17) })
      expect(yield* find(d0.deliveryId)).toMatchObject({ attempts: 1, next_attempt_at: at(17) })
      const requeued = Option.getOrThrow(yield* repo.requeueDelivery({ accountId: owner.accountId, id: d0.deliveryId, now: at(18) }))
      expect(requeued).toMatchObject({ status: "pending", next_attempt_at: at(18) })
      // Due while its webhook is off: dropped, failed, the claim's attempt not counted.
      const [dropped] = yield* repo.claimDueDeliveries({ limit: 1, token: "token-4", leaseMs: 60_000, now: at(18) })
      yield* repo.dropForDisabledWebhook({ deliveryId: dropped.id, token: "token-4", now: at(19) })
      expect(yield* find(dropped.id)).toMatchObject({ status: "failed", attempts: 1, last_error: "webhook disabled", completed_at: at(19) })
      expect(Option.isSome(yield* repo.requeueDelivery({ accountId: owner.accountId, id: dropped.id, now: at(20) }))).toBe(true)
      expect((yield* repo.outboxBacklog(at(20))).pending).toBe(2)
      return { d0: d0.deliveryId, d100: d100.deliveryId }
    }))
    expect(await backend.attemptsOf(ids.d0)).toEqual([{ attempt: 1, status_code: 500 }, { attempt: 1, status_code: 500 }])
    expect(await backend.attemptsOf(ids.d100)).toEqual([])
  })

  test("recovery: an account's failed deliveries since a time are due again oldest first, a pace apart; older, delivered and other accounts' are not; none while disabled", async () => {
    const [owner, other] = [await backend.owner(), await backend.owner()]
    await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      yield* createWebhook(owner.accountId)
      yield* createWebhook(other.accountId)
      yield* attemptOnce(owner.accountId, 10, { statusCode: 500, delivered: false })
      yield* attemptOnce(owner.accountId, 100, { statusCode: 200, delivered: true })
      yield* attemptOnce(owner.accountId, 110, { statusCode: 500, delivered: false })
      yield* attemptOnce(owner.accountId, 120, { statusCode: 500, delivered: false })
      yield* attemptOnce(other.accountId, 130, { statusCode: 500, delivered: false })
      const pace = (n: number) => new Date(at(200).getTime() + n * 250)
      const recovered = yield* repo.recoverDeliveries({ accountId: owner.accountId, since: at(50), now: at(200), paceMs: 250 })
      expect(recovered).toEqual({ queued: 2, last_attempt_at: pace(1) })
      const list = (accountId: string, status: "pending" | "failed") =>
        repo.listDeliveries({ accountId, status, afterId: undefined, limit: 10 })
      // Newest first: the one created at 120 s goes a pace after the one created at 110 s.
      expect((yield* list(owner.accountId, "pending")).map((row) => row.next_attempt_at)).toEqual([pace(1), pace(0)])
      expect((yield* list(owner.accountId, "failed")).map((row) => row.created_at)).toEqual([at(10)])
      expect((yield* list(other.accountId, "failed")).length).toBe(1)
      expect((yield* repo.recoverDeliveries({ accountId: owner.accountId, since: at(50), now: at(201), paceMs: 250 })).queued).toBe(0)
      yield* repo.disableForPlanLoss(other.accountId)
      expect(yield* repo.recoverDeliveries({ accountId: other.accountId, since: at(0), now: at(202), paceMs: 250 })).toEqual({
        queued: 0,
        last_attempt_at: null
      })
    }))
  })

  test("endpoint health: 410 disables at once; failures for WEBHOOK_DISABLE_AFTER disable; a delivery ends the streak", async () => {
    const [gone, failing, recovering] = [await backend.owner(), await backend.owner(), await backend.owner()]
    await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      for (const owner of [gone, failing, recovering]) yield* createWebhook(owner.accountId)
      const state = (owner: Owner) => Effect.map(repo.findWebhook(owner.accountId), Option.getOrThrow)

      yield* attemptOnce(gone.accountId, 0, { statusCode: 410, delivered: false })
      expect(yield* state(gone)).toMatchObject({ enabled: false, disabled_reason: "gone", disabled_at: at(0) })
      // Plan loss keeps the reason; a new URL clears it.
      yield* repo.disableForPlanLoss(gone.accountId)
      expect((yield* state(gone)).disabled_reason).toBe("gone")
      expect(yield* repo.retargetWebhook({ accountId: gone.accountId, url: "https://hooks.example/new", events: undefined })).toMatchObject({
        enabled: true,
        disabled_reason: null,
        disabled_at: null
      })

      yield* attemptOnce(failing.accountId, 0, { statusCode: 500, delivered: false })
      yield* attemptOnce(failing.accountId, hour - 1, { statusCode: 500, delivered: false })
      expect((yield* state(failing)).enabled).toBe(true)
      yield* attemptOnce(failing.accountId, hour, { statusCode: 500, delivered: false })
      expect(yield* state(failing)).toMatchObject({ enabled: false, disabled_reason: "failing", disabled_at: at(hour) })
      expect(Option.isNone(yield* enqueue(failing.accountId, hour + 1))).toBe(true)

      yield* attemptOnce(recovering.accountId, 0, { statusCode: 500, delivered: false })
      yield* attemptOnce(recovering.accountId, 100, { statusCode: 200, delivered: true })
      yield* attemptOnce(recovering.accountId, hour + 200, { statusCode: 500, delivered: false })
      // The streak began again at hour + 200: not failing for an hour yet.
      yield* attemptOnce(recovering.accountId, 2 * hour + 199, { statusCode: 500, delivered: false })
      expect((yield* state(recovering)).enabled).toBe(true)
    }))
  })

  test("the retention sweep deletes finished deliveries past retention, oldest first, in batches; pending ones stay", async () => {
    const owner = await backend.owner()
    const left = await backend.run(Effect.gen(function*() {
      const repo = yield* WebhooksRepo
      yield* createWebhook(owner.accountId)
      for (const second of [0, 10, 20]) yield* attemptOnce(owner.accountId, second, { statusCode: 500, delivered: false })
      yield* enqueue(owner.accountId, 5)
      const sweep = () => Effect.map(repo.sweepFinishedDeliveries({ retentionMs: 15_000, batch: 1, now: at(30) }), (row) => row.swept)
      expect([yield* sweep(), yield* sweep(), yield* sweep()]).toEqual([1, 1, 0])
      const left = yield* repo.listDeliveries({ accountId: owner.accountId, status: undefined, afterId: undefined, limit: 10 })
      expect(left.map((row) => `${row.status} at ${row.created_at.toISOString()}`).sort()).toEqual(
        [`failed at ${at(20).toISOString()}`, `pending at ${at(5).toISOString()}`]
      )
      return left.length
    }))
    expect(left).toBe(2)
  })
}

for (const backend of [postgresBackend(), memoryBackend()]) {
  describe(`contract: ${backend.name}`, () => {
    beforeAll(backend.start)
    afterAll(backend.stop)
    beforeEach(backend.reset)
    describe("jobs", () => jobCases(backend))
    describe("uploads", () => uploadCases(backend))
    describe("webhooks", () => webhookCases(backend))
  })
}

// ---------------------------------------------------------------------------------------------
// The services over the memory layers: no database, time from TestClock

const start = Date.UTC(2026, 2, 2, 9)
const caller: Caller = { accountId: "acct_a", keyId: "key_a", plan: "pro" }
const webhookUrl = "http://127.0.0.1:9/hooks"

/** An MP4's first bytes (an `ftyp` box), padded to `size`. */
const mp4 = (size = 4_096) => {
  const bytes = new Uint8Array(size)
  bytes.set([0, 0, 0, 24], 0)
  bytes.set(new TextEncoder().encode("ftypisom"), 4)
  return bytes
}

const score: ClipScore = { band: "high", hookDurationSec: 1.5, durationSec: 12.5, category: { slug: "food-cooking" }, features: { cuts: 3 } }

type Services = PredictionJobs | PredictionUploads | Webhooks | Dispatcher | Ledger | UploadsRepo | BlobStore

/** The memory repositories and the services over them, with the test's own transport, blob store and quotas. */
const makeWorld = (env: Record<string, string> = {}) => {
  const predictions = emptyPredictionsState()
  predictions.accounts.set(caller.accountId, { suspended: false })
  predictions.apiKeys.set(caller.keyId, { accountId: caller.accountId, revoked: false })
  const jobsRepo = makeJobsRepoInMemory(predictions)
  const uploadsRepo = makeUploadsRepoInMemory(predictions)
  const webhooksRepo = makeWebhooksRepoInMemory()
  const ledgerRepo = makeLedgerRepoInMemory()
  const blobs = new Map<string, Uint8Array>()
  const posts: Array<WebhookRequest> = []
  const world = {
    predictions,
    webhooks: webhooksRepo.state,
    ledger: ledgerRepo.state,
    blobs,
    posts,
    /** What the receiver answers. */
    answer: (): PostResult => ({ _tag: "Answered", status: 204, retryAfterMs: null }),
    /** The account keeps more unpaid clips than allowed (UploadQuotas.checkLandedUnpaid refuses). */
    overUnpaidBound: false
  }

  const blobStore = Layer.succeed(BlobStore, {
    kind: "file",
    put: (key, body) =>
      Effect.map(Stream.runCollect(body), (chunks) => {
        const bytes = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0))
        let offset = 0
        for (const chunk of chunks) {
          bytes.set(chunk, offset)
          offset += chunk.length
        }
        blobs.set(key, bytes)
        return { sizeBytes: bytes.length }
      }),
    size: (key) => Effect.sync(() => Option.map(Option.fromNullishOr(blobs.get(key)), (bytes) => bytes.length)),
    read: (key, maxBytes) => Stream.make((blobs.get(key) ?? new Uint8Array()).subarray(0, maxBytes)),
    list: (prefix) => Effect.sync(() => [...blobs.keys()].filter((key) => key.startsWith(prefix)).sort()),
    withLocalFile: (key) => Effect.die(new Error(`no local file for ${key} in this test`)),
    remove: (key) => Effect.sync(() => void blobs.delete(key)),
    presignedPut: Option.none(),
    watchInterval: Duration.seconds(2)
  })
  // The quota rules are UploadQuotas' own (proven on PostgreSQL); here only the landing's refusal is played.
  const quotas = Layer.succeed(UploadQuotas, {
    admitLink: () => Effect.succeed(undefined),
    admitPut: () => Effect.succeed(undefined),
    checkLandedUnpaid: () =>
      Effect.suspend(() =>
        world.overUnpaidBound ? Effect.fail(new UnpaidClipsLimit({ message: "over the unpaid bound" })) : Effect.succeed(undefined)
      )
  })
  const transport = Layer.succeed(WebhookTransport, {
    post: (request) =>
      Effect.sync(() => {
        posts.push(request)
        return world.answer()
      })
  })
  const secrets = Layer.succeed(Secrets, {
    adminToken: null,
    cursorSecret: Redacted.make(randomBytes(32).toString("base64url")),
    webhookSecretKey: Redacted.make(randomBytes(32).toString("base64url")),
    adminTokenGenerated: false
  })
  const base = Layer.mergeAll(
    jobsRepo.layer,
    uploadsRepo.layer,
    webhooksRepo.layer,
    ledgerRepo.layer,
    memoryTransactions(cloneStates([predictions, webhooksRepo.state, ledgerRepo.state])),
    Layer.succeed(DatabaseMode, { embedded: false, dataDir: "/nonexistent" }),
    blobStore,
    quotas,
    transport,
    secrets,
    WorkSignal.layer
  )
  const services = Layer.mergeAll(PredictionUploads.layerWithoutDependencies, Dispatcher.layerWithoutDependencies).pipe(
    Layer.provideMerge(PredictionJobs.layerWithoutDependencies),
    Layer.provideMerge(Webhooks.layerWithoutDependencies),
    Layer.provideMerge(Ledger.layerWithoutDependencies),
    Layer.provideMerge(base),
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({
      env: { PUBLIC_BASE_URL: "https://api.hookline.example", WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true", ...env }
    })))
  )

  /** Runs `body` with the clock at `start`; answers its exit. */
  const run = <A, E>(body: Effect.Effect<A, E, Services>) =>
    Effect.runPromise(Effect.exit(Effect.andThen(TestClock.setTime(start), body).pipe(
      Effect.provide(Layer.mergeAll(services, TestClock.layer(), Layer.succeed(References.MinimumLogLevel, "Error")))
    )))
  return Object.assign(world, { run })
}

const success = <A, E>(exit: Exit.Exit<A, E>): A => {
  if (Exit.isFailure(exit)) throw new Error(`expected success, got ${String(exit.cause)}`)
  return exit.value
}

/** A new link of the caller's key, and the token its upload URL carries. */
const newLink = Effect.map(
  Effect.flatMap(PredictionUploads, (uploads) => uploads.createUploadLink(caller)),
  (link) => ({ link, token: link.upload_url.split("/uploads/")[1] })
)

/** A link of the caller's key, its file landed (not yet consumed): as an upload PUT leaves it before the queueing step. */
const landedLink = Effect.gen(function*() {
  const repo = yield* UploadsRepo
  const { link, token } = yield* newLink
  expect(yield* repo.claimByToken({ tokenHash: sha256Hex(token), now: yield* currentDate })).toBe(true)
  const blobKey = `uploads/${link.upload_id}`
  yield* Effect.flatMap(BlobStore, (blobs) => blobs.put(blobKey, Stream.make(mp4())))
  expect(yield* repo.landUpload({ id: link.upload_id, sizeBytes: 4_096, kind: "mp4", blobKey, now: yield* currentDate })).toBe(true)
  return { predictionId: link.prediction_id, uploadId: link.upload_id, blobKey }
})

/** A landed link whose job is queued, with credits held if the wallet has them. */
const queuedLink = Effect.tap(landedLink, (job) => Effect.flatMap(PredictionJobs, (jobs) => jobs.queueLanded(job.predictionId, null)))

const openWallet = (topup: number) =>
  Effect.flatMap(Ledger, (ledger) => ledger.openWallet(caller.accountId, { monthlyGrant: 0, monthlyBalance: 0, topupBalance: topup }))

const setWebhook = Effect.flatMap(Webhooks, (webhooks) => webhooks.set(caller.accountId, webhookUrl))

/** The events the outbox holds for the caller, oldest first: type and the data's id and status. */
const eventsOf = (world: ReturnType<typeof makeWorld>) =>
  [...world.webhooks.deliveries.values()].map((delivery) => {
    const body: { type: string; data: { id: string; status?: string } } = JSON.parse(delivery.body)
    return [body.type, body.data.id, body.data.status]
  })

describe("the jobs service over memory", () => {
  test("a landed job is queued with 20 credits held; the worker's success settles them, writes the event and deletes the file", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      yield* openWallet(50)
      yield* setWebhook
      const job = yield* landedLink
      const consumed = Option.getOrThrow(yield* jobs.queueLanded(job.predictionId, "req_1"))
      expect(Result.isSuccess(consumed.reserved)).toBe(true)
      const claimed = Option.getOrThrow(yield* jobs.claimNextJob("w1"))
      expect(claimed).toMatchObject({ id: job.predictionId, attempts: 1, blob_key: job.blobKey })
      yield* TestClock.adjust("20 seconds")
      expect(yield* jobs.heartbeat(job.predictionId, "w1")).toBe(true)
      expect(yield* jobs.finishAndDiscard(job.predictionId, { status: "succeeded", score }, { _tag: "HeldBy", workerId: "w1" })).toBe(true)
      // Finished once: a second finish (a late duplicate) changes nothing.
      expect(yield* jobs.finishAndDiscard(job.predictionId, { status: "succeeded", score }, { _tag: "HeldBy", workerId: "w1" })).toBe(false)
      return { job, prediction: yield* jobs.get(caller, job.predictionId), wallet: yield* Effect.flatMap(Ledger, (l) => l.wallet(caller.accountId)) }
    }))
    const { job, prediction, wallet } = success(exit)
    expect(prediction).toMatchObject({ status: "succeeded", input: { duration_sec: 12.5 }, result: { band: "high" }, error: null })
    expect(prediction.completed_at).toBe(new Date(start + 20_000).toISOString())
    expect(wallet.topup).toBe(30)
    expect([...world.ledger.holds.values()].map((hold) => hold.status)).toEqual(["settled"])
    expect(eventsOf(world)).toEqual([["prediction.succeeded", job.predictionId, "succeeded"]])
    expect(world.blobs.has(job.blobKey)).toBe(false)
    expect(world.predictions.uploads.get(job.uploadId)?.blobKey).toBeNull()
    expect(world.predictions.notifications.map((note) => note.payload)).toEqual(["queued"])
  })

  test("credits short: the job stays awaiting_upload with nothing held; retry start after a top-up queues it, and charges once", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      yield* openWallet(10)
      const job = yield* landedLink
      const consumed = Option.getOrThrow(yield* jobs.queueLanded(job.predictionId, "req_1"))
      const refusal = Result.isFailure(consumed.reserved) ? consumed.reserved.failure._tag : "reserved"
      const waiting = yield* jobs.get(caller, job.predictionId)
      yield* Effect.flatMap(Ledger, (ledger) => ledger.grant(caller.accountId, "topup", 20, { reason: "top-up" }))
      const first = yield* jobs.retryStart(caller, job.uploadId, "req_2")
      const second = yield* jobs.retryStart(caller, job.uploadId, "req_3")
      return { refusal, waiting, first, second }
    }))
    const { first, refusal, second, waiting } = success(exit)
    expect(refusal).toBe("InsufficientCredits")
    expect(waiting).toMatchObject({ status: "awaiting_upload", input: { duration_sec: null } })
    expect(first).toMatchObject({ charged: 20, balances: { topup: 10 }, prediction: { status: "queued" } })
    expect(second).toMatchObject({ charged: 0, balances: { topup: 10 }, prediction: { status: "queued" } })
    expect([...world.ledger.holds.values()].map((hold) => hold.status)).toEqual(["pending"])
    expect(world.ledger.depleted).toEqual([caller.accountId])
  })

  test("a worker that stops heart-beating: re-queued after HEARTBEAT_TIMEOUT, failed and refunded after the last attempt", async () => {
    const world = makeWorld({ PREDICTION_MAX_ATTEMPTS: "2" })
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      yield* openWallet(50)
      yield* setWebhook
      const job = yield* queuedLink
      yield* jobs.claimNextJob("w1")
      yield* TestClock.adjust("29 seconds")
      yield* jobs.requeueStalled
      const beforeTimeout = world.predictions.predictions.get(job.predictionId)?.status
      yield* TestClock.adjust("1 second")
      yield* jobs.requeueStalled
      const requeued = world.predictions.predictions.get(job.predictionId)?.status
      // The first worker lost it: no heartbeat, no finish.
      const lostBeat = yield* jobs.heartbeat(job.predictionId, "w1")
      const lostFinish = yield* jobs.finish(job.predictionId, { status: "succeeded", score }, { _tag: "HeldBy", workerId: "w1" })
      expect(Option.getOrThrow(yield* jobs.claimNextJob("w2")).attempts).toBe(2)
      yield* TestClock.adjust("31 seconds")
      yield* jobs.requeueStalled
      return { job, beforeTimeout, requeued, lostBeat, lostFinish, prediction: yield* jobs.get(caller, job.predictionId) }
    }))
    const { beforeTimeout, job, lostBeat, lostFinish, prediction, requeued } = success(exit)
    expect([beforeTimeout, requeued, lostBeat, lostFinish]).toEqual(["running", "queued", false, false])
    expect(prediction).toMatchObject({ status: "failed", error: { type: "analysis_failed" } })
    expect([...world.ledger.holds.values()].map((hold) => hold.status)).toEqual(["refunded"])
    expect(world.ledger.wallets.get(caller.accountId)?.topup).toBe(50)
    expect(eventsOf(world)).toEqual([["prediction.failed", job.predictionId, "failed"]])
    expect(world.blobs.has(job.blobKey)).toBe(false)
  })

  test("a job queued longer than QUEUE_TIMEOUT fails as expired and is refunded; a younger one is still claimed", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      yield* openWallet(50)
      const old = yield* queuedLink
      yield* TestClock.adjust("30 minutes")
      const young = yield* queuedLink
      yield* TestClock.adjust("30 minutes")
      yield* jobs.expireQueued
      const atTimeout = world.predictions.predictions.get(old.predictionId)?.status
      const claimed = yield* jobs.claimNextJob("w1")
      return { atTimeout, old: yield* jobs.get(caller, old.predictionId), claimed: Option.map(claimed, (job) => job.id), young }
    }))
    const { atTimeout, claimed, old, young } = success(exit)
    expect(atTimeout).toBe("failed")
    expect(old).toMatchObject({ status: "failed", error: { type: "expired" } })
    expect(claimed).toEqual(Option.some(young.predictionId))
    expect([...world.ledger.holds.values()].map((hold) => hold.status).sort()).toEqual(["pending", "refunded"])
    expect(world.ledger.wallets.get(caller.accountId)?.topup).toBe(30)
  })

  test("a clip kept waiting for credits past UNPAID_CLIP_RETENTION fails as expired and its file is deleted", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      yield* openWallet(0)
      const job = yield* queuedLink
      yield* TestClock.adjust("59 minutes")
      yield* jobs.expireUnpaid
      const early = (yield* jobs.get(caller, job.predictionId)).status
      yield* TestClock.adjust("1 minute")
      yield* jobs.expireUnpaid
      return { job, early, late: yield* jobs.get(caller, job.predictionId) }
    }))
    const { early, job, late } = success(exit)
    expect(early).toBe("awaiting_upload")
    expect(late).toMatchObject({ status: "failed", error: { type: "expired" } })
    expect(world.ledger.holds.size).toBe(0)
    expect(world.blobs.has(job.blobKey)).toBe(false)
  })

  test("a prediction is visible to its own key only, for PREDICTION_RETENTION", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      const { link } = yield* newLink
      const own = yield* jobs.get(caller, link.prediction_id)
      const stranger = yield* Effect.flip(jobs.get({ ...caller, keyId: "key_b" }, link.prediction_id))
      yield* TestClock.adjust("24 hours")
      const expired = yield* Effect.flip(jobs.get(caller, link.prediction_id))
      return { own, stranger, expired }
    }))
    const { expired, own, stranger } = success(exit)
    expect(own).toMatchObject({ status: "awaiting_upload", input: null, result: null })
    expect([stranger._tag, expired._tag]).toEqual(["NotFound", "NotFound"])
  })

  test("a job handed back at shutdown is queued again at once, the attempt not counted", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const jobs = yield* PredictionJobs
      yield* openWallet(50)
      const job = yield* queuedLink
      yield* jobs.claimNextJob("w1")
      yield* jobs.handBack(job.predictionId, "w2")
      const stillHeld = world.predictions.predictions.get(job.predictionId)?.claimedBy
      yield* jobs.handBack(job.predictionId, "w1")
      return { stillHeld, next: yield* jobs.claimNextJob("w2") }
    }))
    const { next, stillHeld } = success(exit)
    expect(stillHeld).toBe("w1")
    expect(Option.getOrThrow(next).attempts).toBe(1)
    expect(world.predictions.notifications.map((note) => note.payload)).toEqual(["queued", "queued"])
  })
})

describe("the uploads service over memory", () => {
  test("a link: its job awaiting_upload, valid for UPLOAD_LINK_TTL; its PUT stores the file and queues the job with credits held", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const uploads = yield* PredictionUploads
      yield* openWallet(50)
      const { link, token } = yield* newLink
      const body = { stream: Stream.make(mp4()), declaredBytes: 4_096, empty: false }
      const receipt = yield* uploads.receive(token, body, "req_1")
      const again = yield* Effect.flip(uploads.receive(token, { ...body, stream: Stream.make(mp4()) }, "req_2"))
      const unknown = yield* Effect.flip(uploads.receive("A".repeat(32), body, "req_3"))
      return { link, token, receipt, again: again._tag, unknown: unknown._tag }
    }))
    const { again, link, receipt, token, unknown } = success(exit)
    expect(link.upload_url).toBe(`https://api.hookline.example/uploads/${token}`)
    expect(link.expires_at).toBe(new Date(start + 15 * 60_000).toISOString())
    expect(receipt).toEqual({ object: "upload", upload_id: link.upload_id, prediction_id: link.prediction_id, status: "received" })
    expect([again, unknown]).toEqual(["UploadAlreadyUsed", "NotFound"])
    const upload = world.predictions.uploads.get(link.upload_id)
    expect(upload).toMatchObject({ status: "received", sizeBytes: 4_096, mediaKind: "mp4", tokenHash: sha256Hex(token) })
    expect(world.predictions.predictions.get(link.prediction_id)?.status).toBe("queued")
    expect(world.blobs.get(`uploads/${link.upload_id}`)?.length).toBe(4_096)
    expect([...world.ledger.holds.values()].map((hold) => [hold.status, hold.topupAmount])).toEqual([["pending", 20]])
  })

  test("a link past UPLOAD_LINK_TTL answers 410; a body that is not a video answers 415 and leaves the link usable", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const uploads = yield* PredictionUploads
      yield* openWallet(50)
      const { link, token } = yield* newLink
      const text = new TextEncoder().encode("not a video at all, only some words to fill the sniffing window....")
      const refused = yield* Effect.flip(uploads.receive(token, { stream: Stream.make(text), declaredBytes: text.length, empty: false }, null))
      const afterRefusal = world.predictions.uploads.get(link.upload_id)?.status
      yield* TestClock.adjust("15 minutes")
      const expired = yield* Effect.flip(uploads.receive(token, { stream: Stream.make(mp4()), declaredBytes: 4_096, empty: false }, null))
      return { refused: refused._tag, afterRefusal, expired: expired._tag }
    }))
    expect(success(exit)).toEqual({ refused: "UnsupportedMediaType", afterRefusal: "pending", expired: "UploadExpired" })
  })

  test("over the unpaid bound the landing is undone: nothing held, the file gone, the link able to take it again", async () => {
    const world = makeWorld()
    world.overUnpaidBound = true
    const exit = await world.run(Effect.gen(function*() {
      const uploads = yield* PredictionUploads
      yield* openWallet(5)
      const { link, token } = yield* newLink
      const refused = yield* Effect.flip(uploads.receive(token, { stream: Stream.make(mp4()), declaredBytes: 4_096, empty: false }, null))
      return { link, refused: refused._tag }
    }))
    const { link, refused } = success(exit)
    expect(refused).toBe("UnpaidClipsLimit")
    // The landing's transaction rolled back (the upload received, the refusal noted), then the claim was released.
    expect(world.predictions.uploads.get(link.upload_id)).toMatchObject({ status: "pending", receivedAt: null, receivingStartedAt: null })
    expect(world.predictions.predictions.get(link.prediction_id)?.status).toBe("awaiting_upload")
    expect(world.ledger.depleted).toEqual([])
    expect(world.ledger.holds.size).toBe(0)
    expect(world.blobs.size).toBe(0)
  })
})

describe("the webhooks service and the dispatcher over memory", () => {
  const deliveryOf = (world: ReturnType<typeof makeWorld>) => {
    const [delivery] = world.webhooks.deliveries.values()
    return delivery
  }
  const data = { object: "prediction", id: "pred_0000" }

  test("an event is queued only for an enabled webhook that takes it, and the dispatchers are woken", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const without = yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      const created = yield* webhooks.set(caller.accountId, webhookUrl, ["prediction.failed"])
      const retargeted = yield* webhooks.set(caller.accountId, `${webhookUrl}/two`)
      const notSelected = yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      const selected = yield* webhooks.enqueueEvent(caller.accountId, "prediction.failed", data)
      yield* webhooks.disable(caller.accountId)
      const disabled = yield* webhooks.enqueueEvent(caller.accountId, "prediction.failed", data)
      return { without, created, retargeted, notSelected, selected, disabled, shown: yield* webhooks.get(caller.accountId) }
    }))
    const { created, disabled, notSelected, retargeted, selected, shown, without } = success(exit)
    expect([without, notSelected, disabled]).toEqual([null, null, null])
    expect(created.secret?.startsWith("whsec_")).toBe(true)
    expect(retargeted.secret).toBeUndefined()
    expect(retargeted).toMatchObject({ url: `${webhookUrl}/two`, events: ["prediction.failed"] })
    expect(shown).toMatchObject({ configured: false, url: `${webhookUrl}/two` })
    expect(world.webhooks.notifications.map((note): string | null => note.payload)).toEqual([selected])
  })

  test("a failed attempt is retried per WEBHOOK_RETRY_SCHEDULE, the same event each time, and fails after the last", async () => {
    const world = makeWorld({ WEBHOOK_RETRY_SCHEDULE: "5s,1m" })
    world.answer = () => ({ _tag: "Answered", status: 500, retryAfterMs: null })
    const exit = await world.run(Effect.gen(function*() {
      const dispatcher = yield* Dispatcher
      yield* setWebhook
      yield* Effect.flatMap(Webhooks, (webhooks) => webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data))
      const rounds: Array<number> = []
      const step = (wait: Duration.Input) => Effect.andThen(TestClock.adjust(wait), Effect.map(dispatcher.deliverDue, (n) => void rounds.push(n)))
      const waits: ReadonlyArray<Duration.Input> = ["0 millis", "4 seconds", "1 second", "59 seconds", "1 second", "1 hour"]
      for (const wait of waits) yield* step(wait)
      return rounds
    }))
    expect(success(exit)).toEqual([1, 0, 1, 0, 1, 0])
    const delivery = deliveryOf(world)
    expect(delivery).toMatchObject({ status: "failed", attempts: 3, lastStatusCode: 500, claimToken: null })
    expect(delivery.completedAt?.getTime()).toBe(start + 65_000)
    expect(new Set(world.posts.map((post) => post.headers["webhook-id"]))).toEqual(new Set([delivery.eventId]))
    expect(world.posts.every((post) => post.body === delivery.body)).toBe(true)
    expect(world.webhooks.attempts.map((attempt) => attempt.attempt)).toEqual([1, 2, 3])
  })

  test("410 Gone fails the delivery and disables the webhook; a new URL enables it again", async () => {
    const world = makeWorld()
    world.answer = () => ({ _tag: "Answered", status: 410, retryAfterMs: null })
    const exit = await world.run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      yield* setWebhook
      yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      yield* Effect.flatMap(Dispatcher, (dispatcher) => dispatcher.deliverDue)
      const gone = yield* webhooks.get(caller.accountId)
      const refused = yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      return { gone, refused, again: yield* webhooks.set(caller.accountId, webhookUrl) }
    }))
    const { again, gone, refused } = success(exit)
    expect(gone).toMatchObject({ configured: false, disabled_reason: "gone", disabled_at: new Date(start).toISOString() })
    expect(refused).toBeNull()
    expect(again).toMatchObject({ configured: true, disabled_reason: null })
    expect(deliveryOf(world)).toMatchObject({ status: "failed", attempts: 1, lastStatusCode: 410 })
  })

  test("attempts failing for WEBHOOK_DISABLE_AFTER disable the webhook; a delivery in between starts the streak again", async () => {
    const world = makeWorld({ WEBHOOK_RETRY_SCHEDULE: "20m,20m,20m,20m,20m", WEBHOOK_DISABLE_AFTER: "1h" })
    let status = 500
    world.answer = () => ({ _tag: "Answered", status, retryAfterMs: null })
    const exit = await world.run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const dispatcher = yield* Dispatcher
      yield* setWebhook
      const configured = () => Effect.map(webhooks.get(caller.accountId), (webhook) => webhook.configured)
      yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      yield* dispatcher.deliverDue
      yield* TestClock.adjust("20 minutes")
      status = 200
      yield* dispatcher.deliverDue
      yield* TestClock.adjust("10 minutes")
      status = 500
      yield* webhooks.enqueueEvent(caller.accountId, "prediction.failed", data)
      const seen: Array<boolean> = []
      // Failures at 30, 50, 70 and 90 minutes: an hour of them only at 90.
      for (let attempt = 0; attempt < 4; attempt++) {
        if (attempt > 0) yield* TestClock.adjust("20 minutes")
        yield* dispatcher.deliverDue
        seen.push(yield* configured())
      }
      return seen
    }))
    expect(success(exit)).toEqual([true, true, true, false])
    expect(world.webhooks.webhooks.get(caller.accountId)).toMatchObject({ disabledReason: "failing", disabledAt: new Date(start + 90 * 60_000) })
  })

  test("a delivery due while its webhook is switched off is dropped, not sent; a rotation signs with both secrets for its window", async () => {
    const world = makeWorld()
    const exit = await world.run(Effect.gen(function*() {
      const webhooks = yield* Webhooks
      const dispatcher = yield* Dispatcher
      yield* setWebhook
      yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      yield* webhooks.disable(caller.accountId)
      const dropped = yield* dispatcher.deliverDue
      const sentWhileOff = world.posts.length
      yield* setWebhook
      yield* webhooks.rotate(caller.accountId)
      yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      yield* dispatcher.deliverDue
      yield* TestClock.adjust("24 hours")
      yield* webhooks.enqueueEvent(caller.accountId, "prediction.succeeded", data)
      yield* dispatcher.deliverDue
      return { dropped, sentWhileOff }
    }))
    expect(success(exit)).toEqual({ dropped: 1, sentWhileOff: 0 })
    expect(deliveryOf(world)).toMatchObject({ status: "failed", attempts: 0, lastError: "webhook disabled" })
    const signatures = world.posts.map((post) => post.headers["webhook-signature"].split(" ").length)
    expect(signatures).toEqual([2, 1])
  })
})
