import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { ConfigProvider, Effect, Layer, Logger, Result } from "effect"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { basename, join } from "node:path"
import { demoHook } from "../src/Hooks/DemoData.js"
import {
  AUDIBLE_LUFS,
  bandOf,
  FAST_HOOK_SEC,
  MOTION_ACTIVE,
  STEADY_HOOK_SEC
} from "../src/Predictions/BandModel.js"
import { type ClipScore, ClipScorer, ScoreFailure, type ScoreFailureType } from "../src/Predictions/Scorer.js"
import { sniffMediaKind } from "../src/Predictions/MediaCheck.js"
import { type Clip, type ClipSet, makeClips } from "./support/clips.js"
import { cannotList, startS3, type TestS3 } from "./support/s3.js"
import {
  type ApiKeyBody,
  createDatabase,
  dropDatabase,
  type PredictionBody,
  startTestServer,
  type TestServer,
  type UploadLink
} from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"
import { usingEmbeddedServer } from "./support/process.js"
import {
  ageAcrossLimit,
  blobPath,
  createLink,
  eventsOf,
  expectReceived,
  expectWallet,
  fastBackground,
  getPrediction,
  holdsOf,
  instantScorer,
  journalOf,
  predictionRow,
  put,
  putClip,
  sampleScore,
  uploadRow,
  waitFor,
  waitForStatus
} from "./support/predictions.js"

/**
 * A scorer the test drives: each call waits until the test settles it, found by the upload id
 * (the stored file's name).
 */
const controlledScorer = () => {
  interface Call {
    readonly uploadId: string
    settled: boolean
    interrupted: boolean
    readonly succeed: (score: ClipScore) => void
    readonly fail: (type: ScoreFailureType, message: string) => void
  }
  const calls: Array<Call> = []
  const layer = Layer.succeed(
    ClipScorer,
    ClipScorer.of({
      score: ({ path }) =>
        Effect.callback<ClipScore, ScoreFailure>((resume) => {
          const call: Call = {
            uploadId: basename(path),
            settled: false,
            interrupted: false,
            succeed: (score) => {
              call.settled = true
              resume(Effect.succeed(score))
            },
            fail: (type, message) => {
              call.settled = true
              resume(Effect.fail(new ScoreFailure({ type, message, durationSec: 4.2 })))
            }
          }
          calls.push(call)
          return Effect.sync(() => {
            call.interrupted = true
          })
        })
    })
  )
  /** The open call for this upload, once a worker has started scoring it. */
  const call = (uploadId: string) =>
    waitFor(`the scorer to be called for ${uploadId}`, async () =>
      calls.find((c) => c.uploadId === uploadId && !c.settled && !c.interrupted))
  const callsFor = (uploadId: string) => calls.filter((c) => c.uploadId === uploadId)
  return { layer, call, callsFor }
}

// ---------------------------------------------------------------------------------------------

let clips: ClipSet

beforeAll(async () => {
  clips = await makeClips()
})
afterAll(() => rmSync(clips.dir, { recursive: true, force: true }))

describe("the scorer on real clips", () => {
  const scorerLayer = ClipScorer.layer.pipe(
    Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: {} })))
  )
  const score = (clip: Clip) =>
    Effect.runPromise(Effect.flatMap(ClipScorer, (scorer) => Effect.result(scorer.score({ path: clip.path }))).pipe(
      Effect.provide(scorerLayer)
    ))
  const scored = async (clip: Clip) => {
    const result = await score(clip)
    if (Result.isFailure(result)) throw new Error(`scoring failed: ${result.failure.message}`)
    return result.success
  }
  const failedWith = async (clip: Clip) => {
    const result = await score(clip)
    if (Result.isSuccess(result)) throw new Error("scoring succeeded")
    return result.failure
  }
  const expectCutNear = (actual: number | null, clip: Clip) => {
    expect(actual).not.toBeNull()
    expect(Math.abs((actual ?? 0) - (clip.cutSec ?? 0))).toBeLessThanOrEqual(1 / clip.fps + 1e-9)
  }

  test.each([
    ["H.264 MP4 with audio", "cutMp4"],
    ["MOV (QuickTime)", "cutMov"],
    ["VP9 WebM without a duration", "cutWebm"],
    ["a cut between two colours of equal brightness", "colourCut"]
  ] as const)("finds the hard cut in %s within one frame", async (_name, name) => {
    const clip = clips[name]
    const result = await scored(clip)
    expectCutNear(result.hookDurationSec, clip)
    expect(result.durationSec).not.toBeNull()
    expect(Math.abs((result.durationSec ?? 0) - clip.durationSec)).toBeLessThanOrEqual(2 / clip.fps)
    expect(result.category).toBeNull()
    expect(["low", "medium", "high"]).toContain(result.band)
  })

  test.each([
    ["one continuous shot", "noCut"],
    ["a cross-dissolve", "dissolve"],
    ["a cut after the 10-second opening", "lateCut"]
  ] as const)("reports no hook cut for %s", async (_name, name) => {
    const result = await scored(clips[name])
    expect(result.hookDurationSec).toBeNull()
    expect(Math.abs((result.durationSec ?? 0) - clips[name].durationSec)).toBeLessThanOrEqual(0.1)
  })

  test("gives the same band and measurements for the same file", async () => {
    const first = await scored(clips.cutWebm)
    const second = await scored(clips.cutWebm)
    expect(second).toEqual(first)
    expect(first.band).toBe(bandOf({
      hookDurationSec: first.hookDurationSec,
      motion: Number(first.features.motion),
      loudnessLufs: first.features.loudness_lufs === null ? null : Number(first.features.loudness_lufs)
    }))
  })

  test("measures the loudness of an audio track and reports none without one", async () => {
    const withAudio = await scored(clips.cutMp4)
    expect(Number(withAudio.features.loudness_lufs)).toBeGreaterThan(-30)
    expect(Number(withAudio.features.loudness_lufs)).toBeLessThan(-10)
    const silent = await scored(clips.cutMov)
    expect(silent.features.loudness_lufs).toBeNull()
  })

  test("fails a truncated file and an audio-only file with unsupported_media", async () => {
    const truncated = await failedWith(clips.truncated)
    expect(truncated.type).toBe("unsupported_media")
    const audio = await failedWith(clips.audioOnly)
    expect(audio.type).toBe("unsupported_media")
    expect(audio.message).toBe("The file has no video stream.")
    const text = await failedWith(clips.notVideo)
    expect(text.type).toBe("unsupported_media")
  })

  test("fails a clip over 180 seconds with clip_too_long and its measured duration", async () => {
    const failure = await failedWith(clips.long)
    expect(failure.type).toBe("clip_too_long")
    expect(failure.durationSec).toBeCloseTo(190, 0)
  })
})

describe("the band model", () => {
  test("its hook thresholds are the terciles of hook_duration_sec in the demo catalog (2,000 hooks)", () => {
    const durations = Array.from({ length: 2_000 }, (_, index) => demoHook(index).hook_duration_sec)
      .filter((value): value is number => value !== null)
      .sort((a, b) => a - b)
    const tercile = (k: number) => durations[Math.floor((k / 3) * (durations.length - 1))]
    expect(tercile(1)).toBeCloseTo(FAST_HOOK_SEC, 1)
    expect(tercile(2)).toBeCloseTo(STEADY_HOOK_SEC, 1)
  })

  test.each([
    [{ hookDurationSec: FAST_HOOK_SEC, motion: MOTION_ACTIVE, loudnessLufs: AUDIBLE_LUFS }, "high"],
    [{ hookDurationSec: 0.5, motion: 0, loudnessLufs: AUDIBLE_LUFS }, "high"],
    [{ hookDurationSec: 0.5, motion: 0, loudnessLufs: null }, "medium"],
    [{ hookDurationSec: STEADY_HOOK_SEC, motion: MOTION_ACTIVE, loudnessLufs: null }, "medium"],
    [{ hookDurationSec: null, motion: MOTION_ACTIVE, loudnessLufs: -20 }, "medium"],
    [{ hookDurationSec: STEADY_HOOK_SEC + 0.01, motion: MOTION_ACTIVE - 0.01, loudnessLufs: -40 }, "low"],
    [{ hookDurationSec: null, motion: 0, loudnessLufs: null }, "low"],
    [{ hookDurationSec: 3, motion: 0, loudnessLufs: null }, "low"]
  ] as const)("%o → %s", (features, band) => {
    expect(bandOf(features)).toBe(band)
  })
})

describe("recognising the upload's bytes", () => {
  test("MP4, MOV and WebM by their first bytes; text and Matroska are refused", () => {
    const head = (clip: Clip) => new Uint8Array(readFileSync(clip.path).subarray(0, 64))
    expect(sniffMediaKind(head(clips.cutMp4))).toBe("mp4")
    expect(sniffMediaKind(head(clips.cutMov))).toBe("mov")
    expect(sniffMediaKind(head(clips.cutWebm))).toBe("webm")
    expect(sniffMediaKind(head(clips.notVideo))).toBeNull()
    const matroska = head(clips.cutWebm)
    const docType = Buffer.from(matroska).indexOf(Buffer.from("webm"))
    expect(sniffMediaKind(Uint8Array.from([...matroska.subarray(0, docType - 1), 0x88, ...Buffer.from("matroska")]))).toBeNull()
    const heic = Uint8Array.from([0, 0, 0, 24, ...Buffer.from("ftypheic"), 0, 0, 0, 0, ...Buffer.from("mif1heic")])
    expect(sniffMediaKind(heic)).toBeNull()
    expect(sniffMediaKind(new Uint8Array(0))).toBeNull()
  })
})

// ---------------------------------------------------------------------------------------------
// Through the API, on a real server

/** A webhook endpoint that accepts every delivery, so the outbox rows are the thing under test. */
let receiver: ReturnType<typeof Bun.serve>
beforeAll(() => {
  receiver = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(null, { status: 204 }) })
})
afterAll(() => receiver.stop(true))

const webhookEnv = { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true" }

/** Configures the account's webhook, so terminal transitions write their events for it. */
const enableWebhook = async (server: TestServer, key: string) => {
  const response = await server.request("/v1/webhooks", { method: "PUT", key, body: { url: `http://127.0.0.1:${receiver.port}/hooks` } })
  expect(response.status).toBe(200)
}

describe("predictions through the API", () => {
  const scorer = controlledScorer()
  let server: TestServer
  let owner: { accountId: string; key: string; keyId: string }

  beforeAll(async () => {
    server = await startTestServer({ ...fastBackground, ...webhookEnv, UPLOAD_MAX_BYTES: "1000000" }, { scorer: scorer.layer })
    owner = await server.account({ plan: "pro", monthly_balance: 1000 })
    await enableWebhook(server, owner.key)
  })
  afterAll(() => server.close())

  test("create link: a prediction awaiting its upload, a one-time link, nothing charged", async () => {
    const response = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key: owner.key })
    expect(response.status).toBe(200)
    const link = response.body
    expect(link.upload_id).toMatch(/^upl_[0-9a-f]{32}$/)
    expect(link.prediction_id).toMatch(/^pred_[0-9a-f]{32}$/)
    expect(link.upload_url).toMatch(/^https:\/\/api\.hookline\.example\/uploads\/[A-Za-z0-9_-]{32}$/)
    const lifetime = Date.parse(link.expires_at) - Date.now()
    expect(lifetime).toBeGreaterThan(14 * 60_000)
    expect(lifetime).toBeLessThanOrEqual(15 * 60_000 + 5_000)
    expect(link.expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(response.headers.get("x-credits-charged")).toBeNull()

    const prediction = await getPrediction(server, owner.key, link.prediction_id)
    expect(prediction.status).toBe(200)
    expect(prediction.body).toEqual({
      object: "prediction",
      id: link.prediction_id,
      status: "awaiting_upload",
      created_at: expect.stringMatching(/Z$/),
      completed_at: null,
      input: null,
      result: null,
      error: null
    })
    // The token is stored hashed only.
    const token = link.upload_url.split("/").pop() ?? ""
    const stored = await server.db.query("SELECT token_hash FROM uploads WHERE id = $1", [link.upload_id])
    expect(stored.rows[0].token_hash).toMatch(/^[0-9a-f]{64}$/)
    expect(stored.rows[0].token_hash).not.toContain(token)
    await expectWallet(server.db, owner.accountId, { monthly: 1000, topup: 0, pendingHolds: 0 })
  })

  test("upload → queued (20 reserved) → running → succeeded (20 settled), with balances, journal and event at each step", async () => {
    const link = await createLink(server, owner.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    expect(await uploadRow(server.db, link.upload_id)).toEqual({
      status: "received",
      blob_key: `uploads/${link.upload_id}`,
      size_bytes: readFileSync(clips.cutMp4.path).length,
      media_kind: "mp4"
    })

    // The worker claims it and the (controlled) scorer holds it in running.
    const call = await scorer.call(link.upload_id)
    const running = await waitForStatus(server, owner.key, link.prediction_id, "running")
    expect(running.input).toEqual({ duration_sec: null })
    expect(running.completed_at).toBeNull()
    await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 1 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    expect(existsSync(blobPath(server, link.upload_id))).toBe(true)
    expect((await predictionRow(server.db, link.prediction_id)).attempts).toBe(1)

    call.succeed(sampleScore)
    const done = await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
    expect(done).toEqual({
      object: "prediction",
      id: link.prediction_id,
      status: "succeeded",
      created_at: running.created_at,
      completed_at: expect.stringMatching(/Z$/),
      input: { duration_sec: 8.5 },
      result: { band: "high", hook_duration_sec: 1.2, category: null, hook_text: null, hook_text_confidence: null, similar_hooks: [] },
      error: null
    })
    await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    expect(await holdsOf(server.db, link.prediction_id)).toEqual([
      { status: "settled", monthly: 20, topup: 0, settled_monthly: 20, settled_topup: 0 }
    ])
    const events = (await eventsOf(server.db, owner.accountId)).filter((e) => e.payload.data.id === link.prediction_id)
    expect(events.map((e) => e.event_type)).toEqual(["prediction.succeeded"])
    expect(events[0].payload).toEqual({
      id: expect.stringMatching(/^evt_[0-9a-f]{32}$/),
      object: "event",
      type: "prediction.succeeded",
      created_at: expect.stringMatching(/Z$/),
      data: done
    })
    // The file is gone once the job is terminal.
    await waitFor("the file to be deleted", async () =>
      (await uploadRow(server.db, link.upload_id)).blob_key === null ? true : undefined)
    expect(existsSync(blobPath(server, link.upload_id))).toBe(false)
  })

  test("a scorer failure fails the job: refunded to the buckets it came from, error and prediction.failed event", async () => {
    const mixed = await server.account({ plan: "pro", monthly_balance: 12, topup_balance: 30 })
    await enableWebhook(server, mixed.key)
    const link = await createLink(server, mixed.key)
    expectReceived(await putClip(link.upload_url, clips.cutMov), link)
    const call = await scorer.call(link.upload_id)
    await waitForStatus(server, mixed.key, link.prediction_id, "running")
    await expectWallet(server.db, mixed.accountId, { monthly: 0, topup: 22, pendingHolds: 1 })

    call.fail("unsupported_media", "The video could not be decoded.")
    const failed = await waitForStatus(server, mixed.key, link.prediction_id, "failed")
    expect(failed.error).toEqual({ type: "unsupported_media", message: "The video could not be decoded." })
    expect(failed.result).toBeNull()
    expect(failed.input).toEqual({ duration_sec: 4.2 })
    expect(failed.completed_at).not.toBeNull()
    await expectWallet(server.db, mixed.accountId, { monthly: 12, topup: 30, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -12 },
      { entry_type: "reserve", bucket: "topup", amount: -8 },
      { entry_type: "release", bucket: "topup", amount: 8 },
      { entry_type: "release", bucket: "monthly", amount: 12 }
    ])
    expect((await holdsOf(server.db, link.prediction_id))[0].status).toBe("refunded")
    const events = await eventsOf(server.db, mixed.accountId)
    expect(events.map((e) => e.event_type)).toEqual(["prediction.failed"])
    expect(events[0].payload.data).toEqual(failed)
    await waitFor("the file to be deleted", async () =>
      existsSync(blobPath(server, link.upload_id)) ? undefined : true)
  })

  test("credits short when the file lands: stays awaiting_upload with the file kept; retry start reserves once credits arrive", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 10 })
    const link = await createLink(server, poor.key)
    // The PUT never answers 402.
    expectReceived(await putClip(link.upload_url, clips.cutWebm), link)
    const waiting = await getPrediction(server, poor.key, link.prediction_id)
    expect(waiting.body.status).toBe("awaiting_upload")
    expect(waiting.body.input).toEqual({ duration_sec: null })
    expect(existsSync(blobPath(server, link.upload_id))).toBe(true)
    await expectWallet(server.db, poor.accountId, { monthly: 10, topup: 0, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([])

    // Still short: 402, nothing changed.
    const short = await server.request("/v1/predict", { method: "POST", key: poor.key, body: { upload_id: link.upload_id } })
    expectEnvelope(short, 402, "insufficient_credits")
    expect(short.headers.get("x-credits-charged")).toBeNull()
    expect((await getPrediction(server, poor.key, link.prediction_id)).body.status).toBe("awaiting_upload")
    await expectWallet(server.db, poor.accountId, { monthly: 10, topup: 0, pendingHolds: 0 })

    const granted = await server.admin(`/admin/accounts/${poor.accountId}/credits`, {
      method: "POST",
      body: { bucket: "topup", amount: 30 }
    })
    expect(granted.status).toBe(200)
    const retried = await server.request<PredictionBody>("/v1/predict", { method: "POST", key: poor.key, body: { upload_id: link.upload_id } })
    expect(retried.status).toBe(200)
    expect(retried.headers.get("x-credits-charged")).toBe("20")
    expect(retried.headers.get("x-credits-remaining")).toBe("20")
    expect(retried.body.id).toBe(link.prediction_id)
    expect(["queued", "running"]).toContain(retried.body.status)
    expect(await journalOf(server.db, link.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -10 },
      { entry_type: "reserve", bucket: "topup", amount: -10 }
    ])
    await expectWallet(server.db, poor.accountId, { monthly: 0, topup: 20, pendingHolds: 1 })

    // Again while it runs: returned unchanged, 0 charged.
    const call = await scorer.call(link.upload_id)
    const again = await server.request<PredictionBody>("/v1/predict", { method: "POST", key: poor.key, body: { upload_id: link.upload_id } })
    expect(again.status).toBe(200)
    expect(again.headers.get("x-credits-charged")).toBe("0")
    expect(again.headers.get("x-credits-remaining")).toBe("20")
    expect(again.body.status).toBe("running")
    await expectWallet(server.db, poor.accountId, { monthly: 0, topup: 20, pendingHolds: 1 })

    call.succeed(sampleScore)
    const done = await waitForStatus(server, poor.key, link.prediction_id, "succeeded")
    await expectWallet(server.db, poor.accountId, { monthly: 0, topup: 20, pendingHolds: 0 })
    // And after it finished: unchanged, 0 charged.
    const after = await server.request<PredictionBody>("/v1/predict", { method: "POST", key: poor.key, body: { upload_id: link.upload_id } })
    expect(after.status).toBe(200)
    expect(after.headers.get("x-credits-charged")).toBe("0")
    expect(after.body).toEqual(done)
  })

  test("retry start: 422 before the file lands, 404 for an unknown upload or another key's, 422 for a bad body", async () => {
    const link = await createLink(server, owner.key)
    const early = await server.request("/v1/predict", { method: "POST", key: owner.key, body: { upload_id: link.upload_id } })
    expectEnvelope(early, 422, "validation_error")
    const unknown = await server.request("/v1/predict", {
      method: "POST",
      key: owner.key,
      body: { upload_id: "upl_00000000000000000000000000000000" }
    })
    expectEnvelope(unknown, 404, "not_found")
    const otherKey = await server.admin<ApiKeyBody>(`/admin/accounts/${owner.accountId}/keys`, { method: "POST", body: {} })
    const viaOtherKey = await server.request("/v1/predict", {
      method: "POST",
      key: otherKey.body.api_key,
      body: { upload_id: link.upload_id }
    })
    expectEnvelope(viaOtherKey, 404, "not_found")
    const extra = await server.request("/v1/predict", { method: "POST", key: owner.key, body: { upload_id: link.upload_id, x: 1 } })
    expectEnvelope(extra, 422, "validation_error")
    const missing = await server.request("/v1/predict", { method: "POST", key: owner.key, body: {} })
    expectEnvelope(missing, 422, "validation_error")
    await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 0 })
  })

  test("get prediction: only the creating key, only for 24 hours", async () => {
    const link = await createLink(server, owner.key)
    const otherKey = await server.admin<ApiKeyBody>(`/admin/accounts/${owner.accountId}/keys`, { method: "POST", body: {} })
    expectEnvelope(await getPrediction(server, otherKey.body.api_key, link.prediction_id), 404, "not_found")
    const stranger = await server.account({ plan: "pro" })
    expectEnvelope(await getPrediction(server, stranger.key, link.prediction_id), 404, "not_found")
    expectEnvelope(await getPrediction(server, owner.key, "pred_00000000000000000000000000000000"), 404, "not_found")
    expectEnvelope(await getPrediction(server, owner.key, "nonsense"), 404, "not_found")

    await server.db.query("UPDATE predictions SET created_at = now() - interval '23 hours 59 minutes' WHERE id = $1", [link.prediction_id])
    expect((await getPrediction(server, owner.key, link.prediction_id)).status).toBe(200)
    await server.db.query("UPDATE predictions SET created_at = now() - interval '24 hours 1 second' WHERE id = $1", [link.prediction_id])
    expectEnvelope(await getPrediction(server, owner.key, link.prediction_id), 404, "not_found")
    const retry = await server.request("/v1/predict", { method: "POST", key: owner.key, body: { upload_id: link.upload_id } })
    expectEnvelope(retry, 404, "not_found")
  })
})

describe("the upload PUT", () => {
  const scorer = controlledScorer()
  let server: TestServer
  let owner: { accountId: string; key: string; keyId: string }
  const maxBytes = 1_000_000

  beforeAll(async () => {
    server = await startTestServer({ ...fastBackground, ...webhookEnv, UPLOAD_MAX_BYTES: String(maxBytes) }, { scorer: scorer.layer })
    owner = await server.account({ plan: "pro", monthly_balance: 1000 })
    await enableWebhook(server, owner.key)
  })
  afterAll(() => server.close())

  /** A body of `size` bytes that starts like a real MP4, sent in 64 KiB chunks without a Content-Length. */
  const streamedBody = (size: number, gate?: Promise<void>) => {
    const head = readFileSync(clips.cutMp4.path).subarray(0, 64 * 1024)
    let sent = 0
    return new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (sent >= size) return controller.close()
        if (sent > 0 && gate !== undefined) await gate
        const chunk = sent === 0 ? new Uint8Array(head) : new Uint8Array(Math.min(64 * 1024, size - sent))
        sent += chunk.length
        controller.enqueue(chunk)
      }
    })
  }

  const noFilesLeft = (uploadId: string) =>
    readdirSync(join(server.dataDir, "blobs", "uploads"), { recursive: false })
      .filter((name) => String(name).startsWith(uploadId))

  test("an Authorization header is refused with 400 and leaves the link usable", async () => {
    const link = await createLink(server, owner.key)
    const withKey = await put(link.upload_url, readFileSync(clips.cutMp4.path), { authorization: `Bearer ${owner.key}` })
    expectEnvelope(withKey, 400, "authorization_not_allowed")
    const withOther = await put(link.upload_url, readFileSync(clips.cutMp4.path), { authorization: "Basic abc" })
    expectEnvelope(withOther, 400, "authorization_not_allowed")
    expect((await uploadRow(server.db, link.upload_id)).status).toBe("pending")
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    ;(await scorer.call(link.upload_id)).succeed(sampleScore)
  })

  test("an unknown or malformed link is 404", async () => {
    expectEnvelope(await put(`${server.url}/uploads/${"A".repeat(32)}`, "x"), 404, "not_found")
    expectEnvelope(await put(`${server.url}/uploads/short`, "x"), 404, "not_found")
  })

  test("a used link is 409 and changes nothing", async () => {
    const link = await createLink(server, owner.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    const call = await scorer.call(link.upload_id)
    expectEnvelope(await putClip(link.upload_url, clips.cutMov), 409, "upload_already_used")
    expect((await uploadRow(server.db, link.upload_id)).media_kind).toBe("mp4")
    call.succeed(sampleScore)
    await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
    expectEnvelope(await putClip(link.upload_url, clips.cutMp4), 409, "upload_already_used")
    expect(await journalOf(server.db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
  })

  test("of several PUTs at once on one link, exactly one wins and one job is reserved", async () => {
    const link = await createLink(server, owner.key)
    const bytes = readFileSync(clips.cutMp4.path)
    const responses = await Promise.all(Array.from({ length: 6 }, () => put(link.upload_url, bytes)))
    expect(responses.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409, 409])
    for (const refused of responses.filter((r) => r.status === 409)) expectEnvelope(refused, 409, "upload_already_used")
    ;(await scorer.call(link.upload_id)).succeed(sampleScore)
    await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
    expect(await journalOf(server.db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
  })

  test("a PUT still streaming holds the link: a second one is 409, the first then lands", async () => {
    const link = await createLink(server, owner.key)
    let open = () => {}
    const gate = new Promise<void>((resolve) => {
      open = resolve
    })
    const first = put(link.upload_url, streamedBody(300_000, gate))
    await waitFor("the first PUT to claim the link", async () =>
      (await uploadRow(server.db, link.upload_id)).status === "receiving" ? true : undefined)
    expectEnvelope(await putClip(link.upload_url, clips.cutMp4), 409, "upload_already_used")
    open()
    expectReceived(await first, link)
    expect((await uploadRow(server.db, link.upload_id)).size_bytes).toBe(300_000)
    ;(await scorer.call(link.upload_id)).succeed(sampleScore)
  })

  test("an expired link is 410; the sweeper then fails the job with upload_expired and nothing charged", async () => {
    const link = await createLink(server, owner.key)
    await server.db.query("UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = $1", [link.upload_id])
    expectEnvelope(await putClip(link.upload_url, clips.cutMp4), 410, "upload_expired")
    const failed = await waitForStatus(server, owner.key, link.prediction_id, "failed")
    expect(failed.error).toEqual({ type: "upload_expired", message: "The upload link expired before a file arrived." })
    expect(failed.input).toBeNull()
    expect(failed.completed_at).not.toBeNull()
    expect(await journalOf(server.db, link.prediction_id)).toEqual([])
    expect(await holdsOf(server.db, link.prediction_id)).toEqual([])
    const events = (await eventsOf(server.db, owner.accountId)).filter((e) => e.payload.data.id === link.prediction_id)
    expect(events.map((e) => e.event_type)).toEqual(["prediction.failed"])
    expectEnvelope(await putClip(link.upload_url, clips.cutMp4), 410, "upload_expired")
  })

  test("a file over the limit is 413, declared or streamed, leaves nothing behind and the link usable", async () => {
    const link = await createLink(server, owner.key)
    const declared = await put(link.upload_url, new Uint8Array(maxBytes + 1))
    expectEnvelope(declared, 413, "payload_too_large")
    const streamed = await put(link.upload_url, streamedBody(maxBytes + 200_000))
    expectEnvelope(streamed, 413, "payload_too_large")
    expect((await uploadRow(server.db, link.upload_id)).status).toBe("pending")
    expect(noFilesLeft(link.upload_id)).toEqual([])
    const atLimit = await put(link.upload_url, streamedBody(maxBytes))
    expectReceived(atLimit, link)
    expect((await uploadRow(server.db, link.upload_id)).size_bytes).toBe(maxBytes)
    ;(await scorer.call(link.upload_id)).fail("unsupported_media", "The video could not be decoded.")
  })

  test("a file that is not an MP4, MOV or WebM video is 415, whatever its Content-Type, and the link stays usable", async () => {
    const link = await createLink(server, owner.key)
    const text = await put(link.upload_url, readFileSync(clips.notVideo.path), { "content-type": "video/mp4" })
    expectEnvelope(text, 415, "unsupported_media_type")
    expectEnvelope(await put(link.upload_url, ""), 415, "unsupported_media_type")
    const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, ...new Uint8Array(100)])
    expectEnvelope(await put(link.upload_url, png), 415, "unsupported_media_type")
    expect((await uploadRow(server.db, link.upload_id)).status).toBe("pending")
    expect(noFilesLeft(link.upload_id)).toEqual([])
    expectReceived(await put(link.upload_url, readFileSync(clips.cutWebm.path), { "content-type": "text/plain" }), link)
    expect((await uploadRow(server.db, link.upload_id)).media_kind).toBe("webm")
    ;(await scorer.call(link.upload_id)).succeed(sampleScore)
  })
})

describe("end to end with the real scorer", () => {
  let server: TestServer
  let owner: { accountId: string; key: string; keyId: string }

  beforeAll(async () => {
    server = await startTestServer(fastBackground)
    owner = await server.account({ plan: "pro", monthly_balance: 1000 })
  })
  afterAll(() => server.close())

  test("an MP4 with a cut at 1.6 s succeeds with its hook duration, 20 charged, file deleted", async () => {
    const link = await createLink(server, owner.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    const done = await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
    expect(Math.abs(done.result!.hook_duration_sec! - 1.6)).toBeLessThanOrEqual(1 / 25)
    expect(["low", "medium", "high"]).toContain(done.result!.band)
    expect(done.result!.category).toBeNull()
    expect(done.input!.duration_sec).toBeCloseTo(3, 1)
    await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 0 })
    await waitFor("the file to be deleted", async () => existsSync(blobPath(server, link.upload_id)) ? undefined : true)
  })

  test("a truncated MP4 fails with unsupported_media and a clip over 180 s with clip_too_long, both refunded", async () => {
    const truncated = await createLink(server, owner.key)
    const long = await createLink(server, owner.key)
    expectReceived(await putClip(truncated.upload_url, clips.truncated), truncated)
    expectReceived(await putClip(long.upload_url, clips.long), long)
    const unsupported = await waitForStatus(server, owner.key, truncated.prediction_id, "failed")
    expect(unsupported.error!.type).toBe("unsupported_media")
    expect(unsupported.input).toEqual({ duration_sec: null })
    const tooLong = await waitForStatus(server, owner.key, long.prediction_id, "failed")
    expect(tooLong.error!.type).toBe("clip_too_long")
    expect(tooLong.input!.duration_sec).toBeCloseTo(190, 0)
    await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 0 })
    for (const link of [truncated, long]) {
      expect(await journalOf(server.db, link.prediction_id)).toEqual([
        { entry_type: "reserve", bucket: "monthly", amount: -20 },
        { entry_type: "release", bucket: "monthly", amount: 20 }
      ])
    }
  })
})

describe("the sweeper", () => {
  // No workers: jobs stay queued, so the queue timeout can be reached.
  let server: TestServer
  let owner: { accountId: string; key: string; keyId: string }

  beforeAll(async () => {
    server = await startTestServer({ ...fastBackground, ...webhookEnv, WORKER_CONCURRENCY: "0" }, { scorer: instantScorer })
    owner = await server.account({ plan: "pro", monthly_balance: 1000 })
    await enableWebhook(server, owner.key)
  })
  afterAll(() => server.close())

  test("a job queued over an hour fails with expired and is refunded; retry start returns it with 0 charged", async () => {
    const link = await createLink(server, owner.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    const queued = await getPrediction(server, owner.key, link.prediction_id)
    expect(queued.body.status).toBe("queued")
    await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 1 })
    const retried = await server.request<PredictionBody>("/v1/predict", { method: "POST", key: owner.key, body: { upload_id: link.upload_id } })
    expect(retried.status).toBe(200)
    expect(retried.headers.get("x-credits-charged")).toBe("0")
    expect(retried.headers.get("x-credits-remaining")).toBe("980")
    expect(retried.body).toEqual(queued.body)

    // A second job, queued past the hour in the same statement, shows when a sweep has looked at both.
    const witness = await createLink(server, owner.key)
    expectReceived(await putClip(witness.upload_url, clips.cutMp4), witness)
    await ageAcrossLimit(
      server,
      { table: "predictions", column: "queued_at", kept: link.prediction_id, witness: witness.prediction_id, short: "59 minutes", past: "1 hour 1 second" },
      { key: owner.key, predictionId: witness.prediction_id }
    )
    expect((await getPrediction(server, owner.key, link.prediction_id)).body.status).toBe("queued")
    await server.db.query("UPDATE predictions SET queued_at = now() - interval '1 hour 1 second' WHERE id = $1", [link.prediction_id])
    const failed = await waitForStatus(server, owner.key, link.prediction_id, "failed")
    expect(failed.error).toEqual({ type: "expired", message: "The job waited in the queue longer than 1h." })
    await expectWallet(server.db, owner.accountId, { monthly: 1000, topup: 0, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -20 },
      { entry_type: "release", bucket: "monthly", amount: 20 }
    ])
    const events = (await eventsOf(server.db, owner.accountId)).filter((e) => e.payload.data.id === link.prediction_id)
    expect(events.map((e) => [e.event_type, e.payload.data.error!.type])).toEqual([["prediction.failed", "expired"]])
    await waitFor("the file to be deleted", async () => existsSync(blobPath(server, link.upload_id)) ? undefined : true)
    const after = await server.request<PredictionBody>("/v1/predict", { method: "POST", key: owner.key, body: { upload_id: link.upload_id } })
    expect(after.headers.get("x-credits-charged")).toBe("0")
    expect(after.body).toEqual(failed)
  })

  test("a landed clip still waiting for credits an hour after it landed fails with expired, nothing charged, file deleted", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 5 })
    const link = await createLink(server, poor.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    expect(existsSync(blobPath(server, link.upload_id))).toBe(true)
    await server.db.query("UPDATE uploads SET received_at = now() - interval '1 hour 1 second' WHERE id = $1", [link.upload_id])
    await waitFor("the clip to expire", async () =>
      (await predictionRow(server.db, link.prediction_id)).status === "failed" ? true : undefined)
    const row = (await server.db.query("SELECT error_type FROM predictions WHERE id = $1", [link.prediction_id])).rows[0]
    expect(row.error_type).toBe("expired")
    await expectWallet(server.db, poor.accountId, { monthly: 5, topup: 0, pendingHolds: 0 })
    expect(await journalOf(server.db, link.prediction_id)).toEqual([])
    await waitFor("the file to be deleted", async () => existsSync(blobPath(server, link.upload_id)) ? undefined : true)
  })

  test("a PUT whose process died mid-stream releases its link, or expires it when its time is up", async () => {
    const live = await createLink(server, owner.key)
    const late = await createLink(server, owner.key)
    await server.db.query(
      "UPDATE uploads SET status = 'receiving', receiving_started_at = now() - interval '1 hour 1 second' WHERE id = ANY($1)",
      [[live.upload_id, late.upload_id]]
    )
    await server.db.query("UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = $1", [late.upload_id])
    await waitFor("the live link to be released", async () =>
      (await uploadRow(server.db, live.upload_id)).status === "pending" ? true : undefined)
    const failed = await waitForStatus(server, owner.key, late.prediction_id, "failed")
    expect(failed.error!.type).toBe("upload_expired")
    expect((await uploadRow(server.db, late.upload_id)).status).toBe("expired")
    // The released link takes its file.
    expectReceived(await putClip(live.upload_url, clips.cutMp4), live)
  })
})

describe("several server processes on one database", () => {
  let databaseUrl: string
  let dataDir: string
  const servers: Array<TestServer> = []
  // Every process shares the database and the file store (DATA_DIR), as on one host.
  const sharedEnv = () => ({ ...fastBackground, DATA_DIR: dataDir })
  const start = async (env: Record<string, string>, scorer: Layer.Layer<ClipScorer>) => {
    const server = await startTestServer({ ...sharedEnv(), ...env }, { databaseUrl, scorer })
    servers.push(server)
    return server
  }

  beforeAll(async () => {
    databaseUrl = await createDatabase()
    dataDir = mkdtempSync(join(tmpdir(), "hookline-shared-"))
  })
  afterAll(async () => {
    for (const server of servers) await server.close()
    await dropDatabase(databaseUrl)
    rmSync(dataDir, { recursive: true, force: true })
  })

  test("a server stopped mid-job hands the job back; another process finishes it and the hold is settled once", async () => {
    const first = controlledScorer()
    const a = await start({}, first.layer)
    const owner = await a.account({ plan: "pro", monthly_balance: 100 })
    const link = await createLink(a, owner.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    await first.call(link.upload_id)
    expect(await predictionRow(a.db, link.prediction_id)).toMatchObject({ status: "running", attempts: 1 })

    await a.stop()
    expect(first.callsFor(link.upload_id)[0].interrupted).toBe(true)
    expect(await predictionRow(a.db, link.prediction_id)).toMatchObject({ status: "queued", attempts: 0, claimed_by: null })
    await expectWallet(a.db, owner.accountId, { monthly: 80, topup: 0, pendingHolds: 1 })

    const second = controlledScorer()
    const b = await start({}, second.layer)
    ;(await second.call(link.upload_id)).succeed(sampleScore)
    await waitForStatus(b, owner.key, link.prediction_id, "succeeded")
    expect((await predictionRow(b.db, link.prediction_id)).attempts).toBe(1)
    await expectWallet(b.db, owner.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    expect(await journalOf(b.db, link.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    expect(await holdsOf(b.db, link.prediction_id)).toEqual([
      { status: "settled", monthly: 20, topup: 0, settled_monthly: 20, settled_topup: 0 }
    ])
    await b.stop()
  })

  test("a worker killed mid-job: the job is re-queued after its heartbeat stops (failed after the last attempt), settled once", async () => {
    // The API process runs no workers; its sweeper notices stale heartbeats after three seconds:
    // long enough that a worker starved of CPU on a loaded machine (it beats every 100 ms) is not
    // taken for dead before it is killed.
    const api = await start({ WORKER_CONCURRENCY: "0", HEARTBEAT_TIMEOUT: "3 seconds" }, instantScorer)
    const owner = await api.account({ plan: "pro", monthly_balance: 100 })
    const retried = await createLink(api, owner.key)
    const lastAttempt = await createLink(api, owner.key)

    const doomed = Bun.spawn([process.execPath, join(import.meta.dir, "support", "stalledWorker.ts")], {
      env: {
        ...process.env,
        HOOKLINE_TEST_DATABASE_URL: databaseUrl,
        HOOKLINE_TEST_ENV: JSON.stringify({ ...sharedEnv(), WORKER_CONCURRENCY: "2" })
      },
      stdout: "pipe",
      stderr: "ignore"
    })
    // Killed below; killed here too when the test fails first, so no worker outlives it.
    try {
      const reader = doomed.stdout.getReader()
      let output = ""
      while (!output.includes("ready")) {
        const chunk = await reader.read()
        if (chunk.done) throw new Error("the worker process exited before it was ready")
        output += new TextDecoder().decode(chunk.value)
      }
      for (const link of [retried, lastAttempt]) expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
      for (const link of [retried, lastAttempt]) {
        await waitFor("the worker process to claim the job", async () =>
          (await predictionRow(api.db, link.prediction_id)).status === "running" ? true : undefined)
      }
      // The second job is on its last allowed attempt.
      await api.db.query("UPDATE predictions SET attempts = 3 WHERE id = $1", [lastAttempt.prediction_id])
      await expectWallet(api.db, owner.accountId, { monthly: 60, topup: 0, pendingHolds: 2 })
    } catch (error) {
      doomed.kill("SIGKILL")
      throw error
    }
    doomed.kill("SIGKILL")
    await doomed.exited

    await waitFor("the job to be re-queued", async () =>
      (await predictionRow(api.db, retried.prediction_id)).status === "queued" ? true : undefined)
    const gaveUp = await waitForStatus(api, owner.key, lastAttempt.prediction_id, "failed")
    expect(gaveUp.error).toEqual({ type: "analysis_failed", message: "The analysis stopped 3 times without finishing." })
    await expectWallet(api.db, owner.accountId, { monthly: 80, topup: 0, pendingHolds: 1 })
    expect(await journalOf(api.db, lastAttempt.prediction_id)).toEqual([
      { entry_type: "reserve", bucket: "monthly", amount: -20 },
      { entry_type: "release", bucket: "monthly", amount: 20 }
    ])

    // A new worker process picks the re-queued job up at start; it polls only once an hour, so
    // the next job can only reach it through NOTIFY.
    const scorer = controlledScorer()
    const worker = await start({ WORKER_CONCURRENCY: "1", WORKER_POLL_INTERVAL: "1 hour" }, scorer.layer)
    ;(await scorer.call(retried.upload_id)).succeed(sampleScore)
    await waitForStatus(worker, owner.key, retried.prediction_id, "succeeded")
    expect((await predictionRow(api.db, retried.prediction_id)).attempts).toBe(2)
    await expectWallet(api.db, owner.accountId, { monthly: 80, topup: 0, pendingHolds: 0 })
    expect(await journalOf(api.db, retried.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    expect((await holdsOf(api.db, retried.prediction_id)).map((h) => h.status)).toEqual(["settled"])

    const notified = await createLink(api, owner.key)
    expectReceived(await putClip(notified.upload_url, clips.cutMp4), notified)
    const call = await scorer.call(notified.upload_id)

    // A worker whose claim was taken away (its heartbeat looked stale) stops and writes nothing.
    await api.db.query(
      "UPDATE predictions SET status = 'queued', claimed_by = NULL, heartbeat_at = NULL, queued_at = now() WHERE id = $1",
      [notified.prediction_id]
    )
    await api.db.query("SELECT pg_notify('hookline_predictions', 'queued')")
    await waitFor("the scoring to be interrupted", async () => call.interrupted ? true : undefined)
    ;(await scorer.call(notified.upload_id)).succeed(sampleScore)
    await waitForStatus(worker, owner.key, notified.prediction_id, "succeeded")
    expect((await predictionRow(api.db, notified.prediction_id)).attempts).toBe(2)
    expect(await journalOf(api.db, notified.prediction_id)).toEqual([{ entry_type: "reserve", bucket: "monthly", amount: -20 }])
    await expectWallet(api.db, owner.accountId, { monthly: 60, topup: 0, pendingHolds: 0 })
  })

  test("a worker that cannot see the stored file (DATA_DIR not shared) fails the job with analysis_failed and refunds it", async () => {
    const isolated = mkdtempSync(join(tmpdir(), "hookline-isolated-"))
    const api = await start({ WORKER_CONCURRENCY: "0", DATA_DIR: isolated }, instantScorer)
    await start({ WORKER_CONCURRENCY: "1" }, instantScorer)
    const owner = await api.account({ plan: "pro", monthly_balance: 100 })
    const link = await createLink(api, owner.key)
    expectReceived(await putClip(link.upload_url, clips.cutMp4), link)
    const failed = await waitForStatus(api, owner.key, link.prediction_id, "failed")
    expect(failed.error).toEqual({ type: "analysis_failed", message: "The clip could not be analysed." })
    await expectWallet(api.db, owner.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
    rmSync(isolated, { recursive: true, force: true })
  })
})

describe("clips in S3-compatible object storage (s3rver: the real protocol, signatures checked)", () => {
  let s3: TestS3
  const s3Env = () => ({ ...fastBackground, ...s3.env(), S3_UPLOAD_WATCH_INTERVAL: "100 millis" })
  const gone = (key: string) => async () => (await s3.has(key)) ? undefined : true

  beforeAll(async () => {
    s3 = await startS3()
  })
  afterAll(() => s3.stop())

  describe("presigned uploads (S3_UPLOAD_MODE=presigned, the default)", () => {
    let server: TestServer
    let owner: { accountId: string; key: string; keyId: string }

    beforeAll(async () => {
      server = await startTestServer(s3Env())
      owner = await server.account({ plan: "pro", monthly_balance: 1000 })
    })
    afterAll(() => server.close())

    test("upload_url is a presigned PUT the store accepts; the watcher lands the object, the real scorer reads it, both objects are deleted", async () => {
      const link = await createLink(server, owner.key)
      const url = new URL(link.upload_url)
      expect(`${url.origin}${url.pathname}`).toBe(`${s3.endpoint}/${s3.bucket}/uploads/${link.upload_id}`)
      expect(url.searchParams.get("X-Amz-Expires")).toBe("900")
      expect(url.searchParams.get("X-Amz-Signature")).toMatch(/^[0-9a-f]{64}$/)

      const response = await fetch(link.upload_url, { method: "PUT", body: readFileSync(clips.cutMp4.path) })
      expect(response.status).toBe(200)
      const done = await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
      expect(Math.abs(done.result!.hook_duration_sec! - 1.6)).toBeLessThanOrEqual(1 / 25)
      expect(await uploadRow(server.db, link.upload_id)).toMatchObject({ status: "received", media_kind: "mp4" })
      await expectWallet(server.db, owner.accountId, { monthly: 980, topup: 0, pendingHolds: 0 })
      await waitFor("the uploaded object to be deleted", gone(`uploads/${link.upload_id}`))
      await waitFor("the job's copy to be deleted", gone(`jobs/${link.prediction_id}`))
    })

    test("a PUT whose signature was changed is refused by the store and reaches no job; the link as given still works", async () => {
      const link = await createLink(server, owner.key)
      const signature = new URL(link.upload_url).searchParams.get("X-Amz-Signature")!
      const flipped = `${signature[0] === "0" ? "1" : "0"}${signature.slice(1)}`
      const tampered = link.upload_url.replace(`X-Amz-Signature=${signature}`, `X-Amz-Signature=${flipped}`)
      const refused = await fetch(tampered, { method: "PUT", body: readFileSync(clips.cutMp4.path) })
      expect(refused.status).toBe(403)
      expect(await refused.text()).toContain("<Code>SignatureDoesNotMatch</Code>")
      expect(await s3.has(`uploads/${link.upload_id}`)).toBe(false)
      // A changed signed header (the host) is refused the same way.
      const otherHost = link.upload_url.replace("http://127.0.0.1:", "http://localhost:")
      expect((await fetch(otherHost, { method: "PUT", body: "x" })).status).toBe(403)
      expect((await getPrediction(server, owner.key, link.prediction_id)).body.status).toBe("awaiting_upload")
      expect(await journalOf(server.db, link.prediction_id)).toEqual([])

      expect((await fetch(link.upload_url, { method: "PUT", body: readFileSync(clips.cutMp4.path) })).status).toBe(200)
      await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
    })

    test("an object that is not a video fails the job with unsupported_media and nothing reserved", async () => {
      const link = await createLink(server, owner.key)
      expect((await fetch(link.upload_url, { method: "PUT", body: readFileSync(clips.notVideo.path) })).status).toBe(200)
      const failed = await waitForStatus(server, owner.key, link.prediction_id, "failed")
      expect(failed.error).toEqual({ type: "unsupported_media", message: "The file is not an MP4, MOV or WebM video." })
      expect(await journalOf(server.db, link.prediction_id)).toEqual([])
      await waitFor("the object to be deleted", gone(`uploads/${link.upload_id}`))
    })

    test("a link that expires with no object fails with upload_expired", async () => {
      const link = await createLink(server, owner.key)
      await server.db.query("UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = $1", [link.upload_id])
      const failed = await waitForStatus(server, owner.key, link.prediction_id, "failed")
      expect(failed.error!.type).toBe("upload_expired")
      expect(await journalOf(server.db, link.prediction_id)).toEqual([])
    })
  })

  test("an expired presigned link is refused by the store; the prediction fails with upload_expired, nothing charged", async () => {
    const server = await startTestServer({ ...s3Env(), UPLOAD_LINK_TTL: "1 second" })
    try {
      const owner = await server.account({ plan: "pro", monthly_balance: 100 })
      const link = await createLink(server, owner.key)
      const url = new URL(link.upload_url)
      expect(url.searchParams.get("X-Amz-Expires")).toBe("1")
      const signedAt = Date.parse(url.searchParams.get("X-Amz-Date")!.replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, "$1-$2-$3T$4:$5:$6Z"))
      await waitFor("the link's time to pass", async () => Date.now() > signedAt + 2_000 ? true : undefined)
      const refused = await fetch(link.upload_url, { method: "PUT", body: readFileSync(clips.cutMp4.path) })
      expect(refused.status).toBe(403)
      expect(await refused.text()).toContain("Request has expired")
      const failed = await waitForStatus(server, owner.key, link.prediction_id, "failed")
      expect(failed.error!.type).toBe("upload_expired")
      expect(await s3.has(`uploads/${link.upload_id}`)).toBe(false)
      await expectWallet(server.db, owner.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
    } finally {
      await server.close()
    }
  })

  describe("a bucket the credentials cannot fully use is loud", () => {
    const metricsToken = "metrics-token-for-the-bucket-tests"
    interface LogLine { readonly message: string; readonly level: string; readonly annotations: Record<string, unknown> }

    const readinessOf = async (server: TestServer) => {
      const ready = await server.request<{ error?: { type: string; message: string } }>("/readyz")
      return { status: ready.status, message: ready.body.error?.message }
    }
    const gauge = async (server: TestServer, name: string) => {
      const text = (await server.request<string>("/metrics", { key: metricsToken })).body
      return Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)`, "m").exec(text)?.[1])
    }

    test("credentials without list permission: /readyz 503 names s3:ListBucket; the watcher warns once a round, backing off", async () => {
      const lines: Array<LogLine> = []
      const server = await startTestServer({
        ...s3Env(),
        ...s3.env(cannotList),
        S3_UPLOAD_WATCH_INTERVAL: "50 millis",
        S3_UPLOAD_WATCH_MAX_BACKOFF: "400 millis",
        S3_CHECK_INTERVAL: "100 millis",
        METRICS_TOKEN: metricsToken
      }, { logger: Logger.map(Logger.formatJson, (line) => lines.push(JSON.parse(line) as LogLine)) })
      try {
        const ready = await waitFor("readiness to fail", async () => {
          const answer = await readinessOf(server)
          return answer.status === 503 ? answer : undefined
        })
        expect(ready.message).toBe(`S3 bucket ${s3.bucket}: cannot list objects under uploads/ (needs s3:ListBucket): AccessDenied`)
        expectEnvelope(await server.request("/readyz"), 503, "service_unavailable")

        const watcherWarnings = () => lines.filter((line) => line.message.startsWith("watching presigned uploads failed"))
        await waitFor("four failed watcher rounds", async () => watcherWarnings().length >= 4 ? true : undefined)
        const rounds = watcherWarnings().slice(0, 4)
        expect(rounds.map((line) => line.level)).toEqual(["WARN", "WARN", "WARN", "WARN"])
        expect(rounds.map((line) => line.annotations.failed_rounds)).toEqual([1, 2, 3, 4])
        expect(rounds.map((line) => line.annotations.next_round_ms)).toEqual([100, 200, 400, 400])
        expect(rounds[0].annotations.error).toBe("AccessDenied")
        expect(await gauge(server, "hookline_upload_watch_failing_rounds")).toBeGreaterThanOrEqual(4)
        expect(await gauge(server, "hookline_blob_store_ready")).toBe(0)
        // No error line a round: the check's failure is logged once, the watcher only warns.
        expect(lines.filter((line) => line.level === "ERROR").map((line) => line.message)).toEqual([
          `clip store check failed: ${ready.message}`
        ])
      } finally {
        await server.close()
      }
    })

    test("a wrong secret: /readyz 503 names the refused write, and an upload link is refused with 503 instead of left to expire", async () => {
      const server = await startTestServer({ ...s3Env(), S3_SECRET_ACCESS_KEY: "not-the-secret", S3_CHECK_INTERVAL: "100 millis" })
      try {
        const ready = await waitFor("readiness to fail", async () => {
          const answer = await readinessOf(server)
          return answer.status === 503 ? answer : undefined
        })
        expect(ready.message).toBe(`S3 bucket ${s3.bucket}: cannot write objects under uploads/ (needs s3:PutObject): SignatureDoesNotMatch`)
        const owner = await server.account({ plan: "pro", monthly_balance: 100 })
        const refused = await server.request("/v1/predict/upload", { method: "POST", key: owner.key })
        expectEnvelope(refused, 503, "service_unavailable")
        expect(refused.headers.get("retry-after")).toMatch(/^\d+$/)
        // The message is the client's: the bucket's name and permissions are for /readyz.
        expect((refused.body as { error: { message: string } }).error.message).not.toContain(s3.bucket)
        const made = await server.db.query<{ n: number }>("SELECT count(*)::int AS n FROM uploads WHERE account_id = $1", [owner.accountId])
        expect(made.rows[0].n).toBe(0)
        await expectWallet(server.db, owner.accountId, { monthly: 100, topup: 0, pendingHolds: 0 })
      } finally {
        await server.close()
      }
    })

    test("full access: the check passes and /readyz answers 200", async () => {
      const server = await startTestServer({ ...s3Env(), METRICS_TOKEN: metricsToken })
      try {
        await waitFor("the first check", async () => (await gauge(server, "hookline_blob_store_ready")) === 1 ? true : undefined)
        expect((await readinessOf(server)).status).toBe(200)
        // The check leaves nothing behind.
        expect((await s3.keys()).filter((key) => key.includes("access-check"))).toEqual([])
      } finally {
        await server.close()
      }
    })
  })

  describe("uploads through the server (S3_UPLOAD_MODE=proxy)", () => {
    let server: TestServer
    let owner: { accountId: string; key: string; keyId: string }

    beforeAll(async () => {
      server = await startTestServer({ ...s3Env(), S3_UPLOAD_MODE: "proxy", UPLOAD_MAX_BYTES: "1000000" })
      owner = await server.account({ plan: "pro", monthly_balance: 1000 })
    })
    afterAll(() => server.close())

    test("the PUT streams into the bucket byte for byte; the job succeeds and the object is deleted; refused files leave no object", async () => {
      const link = await createLink(server, owner.key)
      expect(link.upload_url).toContain("/uploads/")
      expectEnvelope(await putClip(link.upload_url, clips.notVideo), 415, "unsupported_media_type")
      const oversized = new Uint8Array(1_200_000)
      oversized.set(readFileSync(clips.cutMp4.path).subarray(0, 64))
      expectEnvelope(await put(link.upload_url, new Blob([oversized]).stream()), 413, "payload_too_large")
      expect(await s3.has(`uploads/${link.upload_id}`)).toBe(false)

      expectReceived(await putClip(link.upload_url, clips.cutMov), link)
      // The bucket holds exactly the bytes sent, streamed through the server.
      expect(Buffer.from(await s3.bytes(`uploads/${link.upload_id}`)).equals(readFileSync(clips.cutMov.path))).toBe(true)
      const done = await waitForStatus(server, owner.key, link.prediction_id, "succeeded")
      expect(Math.abs(done.result!.hook_duration_sec! - 2.4)).toBeLessThanOrEqual(1 / 30)
      await waitFor("the object to be deleted", gone(`uploads/${link.upload_id}`))
    })
  })
})

describe("embedded mode (PGlite: one session shared by the pool's connections, no LISTEN/NOTIFY)", () => {
  test("a server started without DATABASE_URL scores an uploaded clip, its workers polling", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "hookline-embedded-predict-"))
    try {
      // The test polls faster than the default rate limit allows; limits are not what it is about.
      await usingEmbeddedServer({ dataDir, demoCatalogSize: 5, env: { RATE_LIMIT_ENABLED: "false" } }, async (server) => {
        const key = server.demoKey
        const created = await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key })
        expect(created.status).toBe(200)
        const link = created.body
        expect(link.upload_url).toStartWith(`http://localhost:${server.port}/uploads/`)
        expectReceived(await putClip(`${server.url}${new URL(link.upload_url).pathname}`, clips.cutWebm), link)
        const done = await waitFor("the clip to be scored", async () => {
          const prediction = await server.request<PredictionBody>(`/v1/predict/${link.prediction_id}`, { key })
          // Any answer but 200 fails here, not as a timeout.
          expect(prediction.status).toBe(200)
          return prediction.body.status === "succeeded" || prediction.body.status === "failed" ? prediction.body : undefined
        })
        expect(done.status).toBe("succeeded")
        expect(Math.abs((done.result?.hook_duration_sec ?? 0) - 1.0)).toBeLessThanOrEqual(1 / 25)
        const wallet = await server.request("/v1/wallet", { key })
        expect(wallet.status).toBe(200)
        expect(wallet.body).toMatchObject({ monthly_balance: 980, topup_balance: 0 })
      })
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  })
})
