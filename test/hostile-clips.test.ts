/**
 * Hostile tenants against clip scoring: each test sends what an attacker
 * with one cheap key would, then checks that the service answers with the envelope, stays up,
 * and that no credit was charged or lost (balances against the journal).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer, Result } from "effect"
import { existsSync, readFileSync, rmSync } from "node:fs"
import { basename, join } from "node:path"
import { ClipScorer } from "../src/Predictions/Scorer.js"
import { type Clip, type ClipSet, ffmpegPath, makeClips } from "./support/clips.js"
import { expectEnvelope } from "./support/envelope.js"
import {
  ageAcrossLimit,
  blobPath,
  createLink,
  expectReceived,
  expectWallet,
  fastBackground,
  getPrediction,
  journalOf,
  put,
  putClip,
  sampleScore,
  uploadRow,
  waitFor,
  waitForStatus
} from "./support/predictions.js"
import { startS3, type TestS3 } from "./support/s3.js"
import { type ApiKeyBody, type TestServer, startTestServer, type UploadLink } from "./support/server.js"

const sha256 = (bytes: Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex")

/**
 * A scorer that records what it was given (the file's name and a hash of its bytes) and
 * succeeds, at once or, while `hold` is on, when the test releases it.
 */
const recordingScorer = () => {
  interface Call {
    readonly name: string
    readonly sha: string
    readonly release: () => void
  }
  const calls: Array<Call> = []
  const held: Array<Call> = []
  let holding = false
  const layer = Layer.succeed(
    ClipScorer,
    ClipScorer.of({
      score: ({ path }) =>
        Effect.callback((resume) => {
          const call: Call = {
            name: basename(path),
            sha: sha256(readFileSync(path)),
            release: () => resume(Effect.succeed(sampleScore))
          }
          calls.push(call)
          if (holding) held.push(call)
          else call.release()
        })
    })
  )
  return {
    layer,
    calls,
    hold: () => {
      holding = true
    },
    /** Releases the oldest held call, waiting for one to be there. */
    releaseNext: async () => {
      const call = await waitFor("a held scorer call", async () => held.shift())
      call.release()
      return call
    },
    releaseAll: () => {
      holding = false
      for (const call of held.splice(0)) call.release()
    }
  }
}

/** The server still answers: the envelope's own route and a plain read. */
const expectUp = async (server: TestServer, key: string) => {
  expect((await server.request("/v1/wallet", { key })).status).toBe(200)
}

/** The journal's request ids for one prediction's reserve rows. */
const reserveRequestIds = async (server: TestServer, predictionId: string) =>
  (await server.db.query<{ request_id: string | null }>(
    "SELECT request_id FROM credit_journal WHERE reference_id = $1 AND entry_type = 'reserve' ORDER BY seq",
    [predictionId]
  )).rows.map((row) => row.request_id)

let clips: ClipSet
beforeAll(async () => {
  clips = await makeClips()
})
afterAll(() => rmSync(clips.dir, { recursive: true, force: true }))

const sizeOf = (clip: Clip) => readFileSync(clip.path).length

describe("free storage: clips kept while credits are short", () => {
  let server: TestServer
  const maxCount = 2

  beforeAll(async () => {
    server = await startTestServer({
      ...fastBackground,
      UNPAID_CLIPS_MAX_COUNT: String(maxCount),
      // Room for two small clips, not for the large body below.
      UNPAID_CLIPS_MAX_BYTES: String(sizeOf(clips.cutMp4) * 3),
      UNPAID_CLIP_RETENTION: "30 minutes"
    }, { scorer: recordingScorer().layer })
  })
  afterAll(() => server.close())

  test("over the count: the link request and the PUT are 429 unpaid_clips_limit; nothing stored, nothing charged", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 10 })
    const links: Array<UploadLink> = []
    for (let i = 0; i < maxCount + 1; i++) links.push(await createLink(server, poor.key))
    for (const link of links.slice(0, maxCount)) expectReceived(await putClip(link.upload_url, clips.cutMp4), link)

    const refusedLink = await server.request("/v1/predict/upload", { method: "POST", key: poor.key })
    expectEnvelope(refusedLink, 429, "unpaid_clips_limit")
    expect(refusedLink.headers.get("retry-after")).toMatch(/^\d+$/)
    const extra = links[maxCount]
    const refusedPut = await putClip(extra.upload_url, clips.cutMp4)
    expectEnvelope(refusedPut, 429, "unpaid_clips_limit")
    expect(existsSync(blobPath(server, extra.upload_id))).toBe(false)
    expect((await uploadRow(server.db, extra.upload_id)).status).toBe("pending")
    await expectWallet(server.db, poor.accountId, { monthly: 10, topup: 0, pendingHolds: 0 })
    for (const link of links) expect(await journalOf(server.db, link.prediction_id)).toEqual([])
    await expectUp(server, poor.key)

    // Once credits arrive the same link takes its file and is paid for.
    await server.admin(`/admin/accounts/${poor.accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 20 } })
    expectReceived(await putClip(extra.upload_url, clips.cutMp4), extra)
    await waitForStatus(server, poor.key, extra.prediction_id, "succeeded")
    await expectWallet(server.db, poor.accountId, { monthly: 0, topup: 10, pendingHolds: 0 })
  })

  test("over the bytes: a declared or streamed body that would pass the bound is 429 and leaves no file", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 0 })
    const first = await createLink(server, poor.key)
    expectReceived(await putClip(first.upload_url, clips.cutMp4), first)
    const big = new Uint8Array(sizeOf(clips.cutMp4) * 3)
    big.set(readFileSync(clips.cutMp4.path))
    const second = await createLink(server, poor.key)
    expectEnvelope(await put(second.upload_url, big), 429, "unpaid_clips_limit")
    // Chunked, so the size is known only once it landed: stored, then refused and deleted.
    expectEnvelope(await put(second.upload_url, new Blob([big]).stream()), 429, "unpaid_clips_limit")
    expect(existsSync(blobPath(server, second.upload_id))).toBe(false)
    expect((await uploadRow(server.db, second.upload_id)).status).toBe("pending")
    await expectWallet(server.db, poor.accountId, { monthly: 0, topup: 0, pendingHolds: 0 })
    await expectUp(server, poor.key)
  })

  test("an unpaid clip is kept only UNPAID_CLIP_RETENTION after it landed, then fails as expired and its file is deleted", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 5 })
    const link = await createLink(server, poor.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    // Another account's clip, landed past the retention in the same statement, shows when a sweep has looked at both.
    const other = await server.account({ plan: "pro", monthly_balance: 5 })
    const witness = await createLink(server, other.key)
    expectReceived(await putClip(witness.upload_url, clips.cutMp4), witness)
    await ageAcrossLimit(
      server,
      { table: "uploads", column: "received_at", kept: link.upload_id, witness: witness.upload_id, short: "29 minutes", past: "30 minutes 1 second" },
      { key: other.key, predictionId: witness.prediction_id }
    )
    expect((await getPrediction(server, poor.key, link.prediction_id)).body.status).toBe("awaiting_upload")
    await server.db.query("UPDATE uploads SET received_at = now() - interval '30 minutes 1 second' WHERE id = $1", [link.upload_id])
    const failed = await waitForStatus(server, poor.key, link.prediction_id, "failed")
    expect(failed.error).toEqual({ type: "expired", message: "The clip waited for credits longer than 30m." })
    await waitFor("the file to be deleted", async () => existsSync(blobPath(server, link.upload_id)) ? undefined : true)
    await expectWallet(server.db, poor.accountId, { monthly: 5, topup: 0, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([])
  })

  test("a prediction's journal rows carry the request that reserved them: the landing PUT, or retry start", async () => {
    const payer = await server.account({ plan: "pro", monthly_balance: 100 })
    const paid = await createLink(server, payer.key)
    const landing = await putClip(paid.upload_url, clips.cutMp4)
    expectReceived(landing, paid)
    expect(await reserveRequestIds(server, paid.prediction_id)).toEqual([landing.headers.get("x-request-id")])
    await waitForStatus(server, payer.key, paid.prediction_id, "succeeded")
    const settled = await server.db.query("SELECT DISTINCT request_id FROM credit_journal WHERE reference_id = $1", [paid.prediction_id])
    expect(settled.rows).toEqual([{ request_id: landing.headers.get("x-request-id") }])

    const poor = await server.account({ plan: "pro", monthly_balance: 0 })
    const later = await createLink(server, poor.key)
    expectReceived(await putClip(later.upload_url, clips.cutMp4), later)
    await server.admin(`/admin/accounts/${poor.accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 20 } })
    const retried = await server.request("/v1/predict", { method: "POST", key: poor.key, body: { upload_id: later.upload_id } })
    expect(retried.status).toBe(200)
    expect(await reserveRequestIds(server, later.prediction_id)).toEqual([retried.headers.get("x-request-id")])
  })
})

describe("presigned S3 uploads: used links and pending links", () => {
  let s3: TestS3
  let server: TestServer
  const scorer = recordingScorer()
  const pendingPerKey = 100

  beforeAll(async () => {
    s3 = await startS3()
    server = await startTestServer({
      ...fastBackground,
      ...s3.env(),
      S3_UPLOAD_WATCH_INTERVAL: "100 millis",
      WORKER_CONCURRENCY: "1",
      PENDING_UPLOADS_PER_KEY: String(pendingPerKey)
    }, { scorer: scorer.layer })
  })
  afterAll(async () => {
    await server.close()
    await s3.stop()
  })

  test("a second PUT on a used link cannot swap the file the worker scores, and what it writes is swept", async () => {
    const attacker = await server.account({ plan: "pro", monthly_balance: 100 })
    const blocker = await server.account({ plan: "pro", monthly_balance: 100 })
    // The only worker is busy, so the attacker's job waits queued after its file was checked.
    scorer.hold()
    const busy = await createLink(server, blocker.key)
    expect((await fetch(busy.upload_url, { method: "PUT", body: readFileSync(clips.cutMov.path) })).status).toBe(200)
    await waitForStatus(server, blocker.key, busy.prediction_id, "running")

    const link = await createLink(server, attacker.key)
    const original = readFileSync(clips.cutMp4.path)
    expect((await fetch(link.upload_url, { method: "PUT", body: original })).status).toBe(200)
    await waitForStatus(server, attacker.key, link.prediction_id, "queued")
    // S3 takes the same presigned PUT again until the link expires.
    const swapped = new Uint8Array(2_000_000)
    swapped.set(original.subarray(0, 64))
    expect((await fetch(link.upload_url, { method: "PUT", body: swapped })).status).toBe(200)
    await waitFor("the swapped object to be swept", async () => (await s3.has(`uploads/${link.upload_id}`)) ? undefined : true)

    await scorer.releaseNext()
    scorer.releaseAll()
    await waitForStatus(server, attacker.key, link.prediction_id, "succeeded")
    expect(scorer.calls.at(-1)?.sha).toBe(sha256(original))

    // A PUT after the job ended: its object is deleted too.
    expect((await fetch(link.upload_url, { method: "PUT", body: swapped })).status).toBe(200)
    await waitFor("the late object to be swept", async () => (await s3.has(`uploads/${link.upload_id}`)) ? undefined : true)
    await waitFor("the job's object to be deleted", async () =>
      (await s3.keys()).some((key) => key.includes(link.prediction_id) || key.includes(link.upload_id)) ? undefined : true)
    await expectWallet(server.db, attacker.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    await expectUp(server, attacker.key)
  })

  test("a presigned clip landing over the unpaid bound fails at once as expired; nothing charged, nothing kept", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 0 })
    // Links made while there was room (the default bound is 3 unpaid clips), all used afterwards.
    const links: Array<UploadLink> = []
    for (let i = 0; i < 4; i++) links.push(await createLink(server, poor.key))
    for (const link of links) {
      expect((await fetch(link.upload_url, { method: "PUT", body: readFileSync(clips.cutMp4.path) })).status).toBe(200)
    }
    const over = links[3]
    const failed = await waitForStatus(server, poor.key, over.prediction_id, "failed")
    expect(failed.error?.type).toBe("expired")
    for (const link of links.slice(0, 3)) {
      const kept = await getPrediction(server, poor.key, link.prediction_id)
      expect(kept.body).toMatchObject({ status: "awaiting_upload", input: { duration_sec: null } })
    }
    await waitFor("the refused clip's objects to be deleted", async () =>
      (await s3.keys()).some((key) => key.includes(over.prediction_id) || key.includes(over.upload_id)) ? undefined : true)
    expectEnvelope(await server.request("/v1/predict/upload", { method: "POST", key: poor.key }), 429, "unpaid_clips_limit")
    await expectWallet(server.db, poor.accountId, { monthly: 0, topup: 0, pendingHolds: 0 })
    for (const link of links) expect(await journalOf(server.db, link.prediction_id)).toEqual([])
    await expectUp(server, poor.key)
  })

  test("600 pending links from one tenant do not hide another tenant's upload; a key over its pending cap gets 429", async () => {
    const hostile = await server.account({ plan: "pro", monthly_balance: 0 })
    const keys = [hostile.key]
    for (let i = 1; i < 6; i++) {
      const created = await server.admin<ApiKeyBody>(`/admin/accounts/${hostile.accountId}/keys`, { method: "POST", body: {} })
      keys.push(created.body.api_key)
    }
    await Promise.all(keys.map(async (key) => {
      for (let i = 0; i < pendingPerKey; i++) await createLink(server, key)
    }))
    const victim = await server.account({ plan: "pro", monthly_balance: 100 })
    const link = await createLink(server, victim.key)
    expect((await fetch(link.upload_url, { method: "PUT", body: readFileSync(clips.cutMp4.path) })).status).toBe(200)
    await waitForStatus(server, victim.key, link.prediction_id, "succeeded")
    await expectWallet(server.db, victim.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    await expectWallet(server.db, hostile.accountId, { monthly: 0, topup: 0, pendingHolds: 0 })

    const overCap = await server.request("/v1/predict/upload", { method: "POST", key: keys[0] })
    expectEnvelope(overCap, 429, "too_many_pending_uploads")
    expect(overCap.headers.get("retry-after")).toMatch(/^\d+$/)
    await expectUp(server, hostile.key)
  }, 120_000)
})

describe("hostile clips against the scorer and the workers", () => {
  /** 1,000 frames a second for 5 seconds: 5,000 frames in the opening, about 4 MB of ffmpeg output. */
  let manyFrames: string
  beforeAll(async () => {
    manyFrames = join(clips.dir, "many-frames.mp4")
    const child = Bun.spawn([
      ffmpegPath, "-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=32x32:rate=1000", "-t", "5",
      "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", manyFrames
    ], { stdin: "ignore", stdout: "ignore", stderr: "ignore" })
    expect(await child.exited).toBe(0)
  })

  const scoreWith = (settings: Record<string, string>, path: string) =>
    Effect.runPromise(Effect.flatMap(ClipScorer, (scorer) => Effect.result(scorer.score({ path }))).pipe(
      Effect.provide(ClipScorer.layer.pipe(
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: settings })))
      ))
    ))

  test("frames analysed are capped (SCORER_MAX_FRAMES)", async () => {
    const result = await scoreWith({ SCORER_MAX_FRAMES: "300" }, manyFrames)
    if (Result.isFailure(result)) throw new Error(`scoring failed: ${result.failure.message}`)
    expect(result.success.features.frames_analysed).toBe(300)
  })

  test("output past SCORER_MAX_OUTPUT_BYTES stops the tool and fails the clip with analysis_failed", async () => {
    const result = await scoreWith({ SCORER_MAX_OUTPUT_BYTES: "20000" }, manyFrames)
    expect(Result.isFailure(result) ? result.failure.type : "scored").toBe("analysis_failed")
  })

  test("jobs are claimed fairly: one account's queue does not hold the only worker; failures are refunded", async () => {
    const scorer = recordingScorer()
    const server = await startTestServer({ ...fastBackground, WORKER_CONCURRENCY: "2" }, { scorer: scorer.layer })
    try {
      const hostile = await server.account({ plan: "pro", monthly_balance: 100 })
      const victim = await server.account({ plan: "pro", monthly_balance: 100 })
      scorer.hold()
      const hostileLinks: Array<UploadLink> = []
      for (let i = 0; i < 4; i++) {
        const link = await createLink(server, hostile.key)
        expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
        hostileLinks.push(link)
      }
      // Both workers hold one of the hostile account's jobs; the victim's job queues behind two more.
      await waitFor("both workers to be busy", async () => scorer.calls.length === 2 ? true : undefined)
      const victimLink = await createLink(server, victim.key)
      expectReceived(await putClip(victimLink.upload_url, clips.cutMp4), victimLink)

      expect((await scorer.releaseNext()).name).toBe(hostileLinks[0].upload_id)
      // The hostile account still runs one job and the victim none: the victim's job is next.
      const next = await waitFor("the next claim", async () => scorer.calls[2])
      expect(next.name).toBe(victimLink.upload_id)
      scorer.releaseAll()
      for (const link of hostileLinks) await waitForStatus(server, hostile.key, link.prediction_id, "succeeded")
      await expectWallet(server.db, hostile.accountId, { monthly: 20, topup: 0, pendingHolds: 0 })
      await expectWallet(server.db, victim.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    } finally {
      await server.close()
    }
  })

  test("a clip that floods ffmpeg's output fails with analysis_failed, refunded, and the server stays up", async () => {
    const server = await startTestServer({ ...fastBackground, SCORER_MAX_OUTPUT_BYTES: "20000", UPLOAD_MAX_BYTES: "1000000" })
    try {
      const hostile = await server.account({ plan: "pro", monthly_balance: 100 })
      const link = await createLink(server, hostile.key)
      expectReceived(await put(link.upload_url, readFileSync(manyFrames)), link)
      const failed = await waitForStatus(server, hostile.key, link.prediction_id, "failed")
      expect(failed.error?.type).toBe("analysis_failed")
      await expectWallet(server.db, hostile.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
      expect(await journalOf(server.db, link.prediction_id)).toEqual([
        { entry_type: "reserve", bucket: "monthly", amount: -20 },
        { entry_type: "release", bucket: "monthly", amount: 20 }
      ])
      await expectUp(server, hostile.key)
    } finally {
      await server.close()
    }
  })
})
