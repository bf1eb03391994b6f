/**
 * The prediction lifecycle below HTTP: the uploads and jobs services (and the sweeper's pass)
 * built alone on a real Postgres with the real Ledger, a BlobStore in memory and a fake clip
 * scorer, every timeout driven by TestClock instead of sleeping. Each test checks the money:
 * balances against the journal, the journal rows, the hold's end.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Duration, Effect, Layer, ManagedRuntime, Option, References, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { randomBytes } from "node:crypto"
import { join } from "node:path"
import { tempDir } from "./support/tempDirs.js"
import { Ledger } from "../src/Ledger/Ledger.js"
import { BlobStore } from "../src/Predictions/BlobStore.js"
import { PredictionJobs } from "../src/Predictions/Jobs.js"
import { JobsRepo } from "../src/Predictions/JobsRepo.js"
import { UploadQuotas } from "../src/Predictions/Quotas.js"
import { ClipScorer, ScoreFailure } from "../src/Predictions/Scorer.js"
import { BucketAccess } from "../src/Predictions/BucketCheck.js"
import { PredictionsSweeper } from "../src/Predictions/Sweeper.js"
import type { UploadBody } from "../src/Predictions/Services.js"
import { PredictionUploads } from "../src/Predictions/Uploads.js"
import { UploadsRepo } from "../src/Predictions/UploadsRepo.js"
import { scoreJob } from "../src/Predictions/Worker.js"
import { WorkSignal } from "../src/Predictions/WorkSignal.js"
import { SqlLive } from "../src/Sql.js"
import { Webhooks } from "../src/Webhooks/Webhooks.js"
import { expectWallet, holdsOf, journalOf, sampleScore } from "./support/predictions.js"
import { createDatabase, dropDatabase, testPool } from "./support/server.js"

// ---------------------------------------------------------------------------------------------
// The fakes: a BlobStore in memory, and a scorer that fails any clip whose bytes say "unreadable".

const blobs = new Map<string, Uint8Array>()

const MemoryBlobStore = Layer.succeed(
  BlobStore,
  BlobStore.of({
    kind: "file",
    put: (key, body) =>
      Stream.runCollect(body).pipe(Effect.map((chunks) => {
        const bytes = Buffer.concat([...chunks])
        blobs.set(key, bytes)
        return { sizeBytes: bytes.length }
      })),
    size: (key) => Effect.sync(() => Option.map(Option.fromNullishOr(blobs.get(key)), (bytes) => bytes.length)),
    read: (key, maxBytes) => Stream.make((blobs.get(key) ?? new Uint8Array()).subarray(0, maxBytes)),
    list: (prefix) => Effect.sync(() => [...blobs.keys()].filter((key) => key.startsWith(prefix)).sort()),
    // The "local file" is the key itself: the fake scorer reads the bytes from the map.
    withLocalFile: (key, use) => use(key),
    remove: (key) => Effect.sync(() => void blobs.delete(key)),
    presignedPut: Option.none(),
    watchInterval: Duration.seconds(1)
  })
)

const FakeScorer = Layer.succeed(
  ClipScorer,
  ClipScorer.of({
    score: ({ path }) =>
      Buffer.from(blobs.get(path) ?? []).includes("unreadable")
        ? Effect.fail(new ScoreFailure({ type: "unsupported_media", message: "The video could not be decoded.", durationSec: null }))
        : Effect.succeed(sampleScore)
  })
)

/** An MP4 as far as the upload's check can tell: an `ftyp` box, then `text`. */
const clip = (text: string) =>
  Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from("ftypisom"), Buffer.alloc(52), Buffer.from(text)])

const body = (bytes: Uint8Array): UploadBody => ({ stream: Stream.make(bytes), declaredBytes: bytes.length, empty: false })

// ---------------------------------------------------------------------------------------------
// The services under test, and only what they need.

const env = {
  PREDICTION_MAX_ATTEMPTS: "2",
  LOG_LEVEL: "Error"
}

const PredictionServices = PredictionsSweeper.layerWithoutDependencies.pipe(
  Layer.provideMerge(PredictionUploads.layerWithoutDependencies),
  Layer.provideMerge(PredictionJobs.layerWithoutDependencies),
  Layer.provideMerge(
    Layer.mergeAll(UploadsRepo.layer, JobsRepo.layer, UploadQuotas.layer, Ledger.layer, Webhooks.layer, WorkSignal.layer, BucketAccess.layer)
  ),
  Layer.provideMerge(Layer.merge(MemoryBlobStore, FakeScorer))
)

let databaseUrl: string
let runtime: ManagedRuntime.ManagedRuntime<Layer.Success<typeof PredictionServices> | SqlClient.SqlClient, unknown>
let db: ReturnType<typeof testPool>

beforeAll(async () => {
  databaseUrl = await createDatabase()
  const provider = ConfigProvider.fromEnv({
    env: { ...env, DATABASE_URL: databaseUrl, DATA_DIR: tempDir("hookline-lifecycle-") }
  })
  runtime = ManagedRuntime.make(PredictionServices.pipe(
    Layer.provideMerge(SqlLive),
    Layer.provideMerge(Layer.succeed(References.MinimumLogLevel, "Error")),
    Layer.provide(ConfigProvider.layer(provider))
  ))
  db = testPool(databaseUrl, 2)
})

afterAll(async () => {
  await runtime.dispose()
  await db.end()
  await dropDatabase(databaseUrl)
})

/** Runs a test's effect with TestClock as its Clock, set to the real time to start with. */
const run = <A, E>(effect: Effect.Effect<A, E, Layer.Success<typeof PredictionServices> | SqlClient.SqlClient>) =>
  runtime.runPromise(
    TestClock.setTime(Date.now()).pipe(Effect.andThen(effect), Effect.provide(TestClock.layer()))
  )

/** An account with `monthly` credits and one key. */
const account = (monthly: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger
    const accountId = `acct_${randomBytes(16).toString("hex")}`
    const keyId = `key_${randomBytes(16).toString("hex")}`
    yield* sql`INSERT INTO accounts (id, plan, monthly_grant) VALUES (${accountId}, 'pro', ${monthly})`
    yield* sql`INSERT INTO api_keys (id, account_id, key_hash, scopes) VALUES (${keyId}, ${accountId}, ${keyId}, '{}')`
    yield* ledger.openWallet(accountId, { monthlyGrant: monthly, monthlyBalance: monthly, topupBalance: 0 })
    return { accountId, keyId, plan: "pro" }
  }).pipe(Effect.orDie)

/** An account with `monthly` credits and an upload link of its own, made now (by the TestClock). */
const linkFor = (monthly: number) =>
  Effect.gen(function*() {
    const caller = yield* account(monthly)
    const link = yield* Effect.flatMap(PredictionUploads, (uploads) => uploads.createUploadLink(caller))
    const token = link.upload_url.split("/").pop() ?? ""
    return { caller, link, put: (bytes: Uint8Array) => Effect.flatMap(PredictionUploads, (uploads) => uploads.receive(token, body(bytes), null)) }
  })

/** What a worker does with the next job: claim it, score it with the ClipScorer, finish it. */
const workNextJob = (workerId: string) =>
  Effect.gen(function*() {
    const jobs = yield* PredictionJobs
    const job = yield* jobs.claimNextJob(workerId)
    if (Option.isNone(job)) return yield* Effect.die(new Error("no job to claim"))
    const outcome = yield* scoreJob(yield* BlobStore, yield* ClipScorer)(job.value)
    return yield* jobs.finishAndDiscard(job.value.id, outcome, { _tag: "HeldBy", workerId })
  })

const statusOf = (predictionId: string) =>
  Effect.flatMap(JobsRepo, (repo) => repo.findPrediction(predictionId)).pipe(
    Effect.map((row) => Option.map(row, (found) => found.status))
  )

describe("the prediction lifecycle, services alone", () => {
  test("a landed clip is queued with 20 reserved; its success settles the 20 and deletes the file", async () => {
    const { caller, link } = await run(Effect.gen(function*() {
      const { caller, link, put } = yield* linkFor(100)
      const receipt = yield* put(clip("a fine clip"))
      expect(receipt).toEqual({ object: "upload", upload_id: link.upload_id, prediction_id: link.prediction_id, status: "received" })
      expect(yield* statusOf(link.prediction_id)).toEqual(Option.some("queued"))
      return { caller, link }
    }))
    await expectWallet(db, caller.accountId, { monthly: 80, topup: 0, pendingHolds: 1 })
    expect(blobs.has(`uploads/${link.upload_id}`)).toBe(true)

    expect(await run(workNextJob("worker-a"))).toBe(true)
    expect(await run(statusOf(link.prediction_id))).toEqual(Option.some("succeeded"))
    await expectWallet(db, caller.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    expect(await journalOf(db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    expect(await holdsOf(db, link.prediction_id)).toEqual([{ status: "settled", monthly: 20, topup: 0, settled_monthly: 20, settled_topup: 0 }])
    expect(blobs.has(`uploads/${link.upload_id}`)).toBe(false)
  })

  test("a clip the scorer cannot read fails the job and refunds the 20", async () => {
    const { caller, link } = await run(Effect.gen(function*() {
      const { caller, link, put } = yield* linkFor(100)
      yield* put(clip("unreadable"))
      expect(yield* workNextJob("worker-a")).toBe(true)
      return { caller, link }
    }))
    expect(await run(statusOf(link.prediction_id))).toEqual(Option.some("failed"))
    await expectWallet(db, caller.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
    expect(await journalOf(db, link.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -20 },
      { entry_type: "release", bucket: "monthly", amount: 20 }
    ])
    expect((await holdsOf(db, link.prediction_id))[0].status).toBe("refunded")
  })

  test("a link unused past UPLOAD_LINK_TTL answers 410; the sweep fails its job with upload_expired, nothing charged", async () => {
    const outcome = await run(Effect.gen(function*() {
      const { caller, link, put } = yield* linkFor(100)
      const sweeper = yield* PredictionsSweeper
      // Still open a second before it runs out; the sweep leaves it alone.
      yield* TestClock.adjust("899 seconds")
      yield* sweeper.sweep
      expect(yield* statusOf(link.prediction_id)).toEqual(Option.some("awaiting_upload"))
      yield* TestClock.adjust("2 seconds")
      const late = yield* Effect.flip(put(clip("too late")))
      expect(late._tag).toBe("UploadExpired")
      yield* sweeper.sweep
      return { caller, link }
    }))
    expect(await run(statusOf(outcome.link.prediction_id))).toEqual(Option.some("failed"))
    const row = await db.query("SELECT error_type FROM predictions WHERE id = $1", [outcome.link.prediction_id])
    expect(row.rows[0].error_type).toBe("upload_expired")
    await expectWallet(db, outcome.caller.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
    expect(await journalOf(db, outcome.link.prediction_id)).toEqual([])
  })

  test("a prediction is visible to its key for PREDICTION_RETENTION (24 hours), then not found", async () => {
    const answers = await run(Effect.gen(function*() {
      const { caller, link } = yield* linkFor(100)
      const jobs = yield* PredictionJobs
      const read = jobs.get(caller, link.prediction_id).pipe(
        Effect.map((prediction) => prediction.status),
        Effect.catchTag("NotFound", (error) => Effect.succeed(error._tag))
      )
      yield* TestClock.adjust("1439 minutes")
      const before = yield* read
      yield* TestClock.adjust("2 minutes")
      return { before, after: yield* read }
    }))
    expect(answers).toEqual({ before: "awaiting_upload", after: "NotFound" })
  })

  test("a job whose worker stops heart-beating is re-queued after HEARTBEAT_TIMEOUT, failed and refunded after the last attempt", async () => {
    const { caller, link } = await run(Effect.gen(function*() {
      const { caller, link, put } = yield* linkFor(100)
      yield* put(clip("a clip"))
      const jobs = yield* PredictionJobs
      const sweeper = yield* PredictionsSweeper
      const first = yield* jobs.claimNextJob("worker-a")
      expect(Option.map(first, (job) => job.attempts)).toEqual(Option.some(1))

      // A heartbeat 20 s in keeps the job: 40 s after the claim it is only 20 s stale.
      yield* TestClock.adjust("20 seconds")
      expect(yield* jobs.heartbeat(link.prediction_id, "worker-a")).toBe(true)
      yield* TestClock.adjust("20 seconds")
      yield* sweeper.sweep
      expect(yield* statusOf(link.prediction_id)).toEqual(Option.some("running"))

      // Silent past HEARTBEAT_TIMEOUT (30 s): back to the queue, and worker-a's claim is gone.
      yield* TestClock.adjust("11 seconds")
      yield* sweeper.sweep
      expect(yield* statusOf(link.prediction_id)).toEqual(Option.some("queued"))
      expect(yield* jobs.heartbeat(link.prediction_id, "worker-a")).toBe(false)

      // The second (last, PREDICTION_MAX_ATTEMPTS=2) claim stalls too: failed, refunded.
      const second = yield* jobs.claimNextJob("worker-b")
      expect(Option.map(second, (job) => job.attempts)).toEqual(Option.some(2))
      yield* TestClock.adjust("31 seconds")
      yield* sweeper.sweep
      expect(yield* statusOf(link.prediction_id)).toEqual(Option.some("failed"))
      // A late finish by either worker changes nothing.
      const late = yield* jobs.finish(link.prediction_id, { status: "succeeded", score: sampleScore }, { _tag: "HeldBy", workerId: "worker-b" })
      expect(late).toBe(false)
      return { caller, link }
    }))
    const row = await db.query("SELECT error_type, attempts FROM predictions WHERE id = $1", [link.prediction_id])
    expect(row.rows[0]).toEqual({ error_type: "analysis_failed", attempts: 2 })
    await expectWallet(db, caller.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
    expect(await journalOf(db, link.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -20 },
      { entry_type: "release", bucket: "monthly", amount: 20 }
    ])
    expect(blobs.has(`uploads/${link.upload_id}`)).toBe(false)
  })

  test("a job left queued past QUEUE_TIMEOUT (1 hour) is no longer claimed; the sweep fails it with expired and refunds it", async () => {
    const { caller, link } = await run(Effect.gen(function*() {
      const { caller, link, put } = yield* linkFor(30)
      yield* put(clip("a clip"))
      const jobs = yield* PredictionJobs
      const sweeper = yield* PredictionsSweeper
      yield* TestClock.adjust("1 hour")
      expect(yield* jobs.claimNextJob("worker-a")).toEqual(Option.none())
      yield* sweeper.sweep
      return { caller, link }
    }))
    const row = await db.query("SELECT status, error_type FROM predictions WHERE id = $1", [link.prediction_id])
    expect(row.rows[0]).toEqual({ status: "failed", error_type: "expired" })
    await expectWallet(db, caller.accountId, { monthly: 30, topup: 0, pendingHolds: 0 })
    expect(await journalOf(db, link.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -20 },
      { entry_type: "release", bucket: "monthly", amount: 20 }
    ])
  })
})
