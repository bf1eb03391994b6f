/**
 * What one tenant may hold for free: upload links cost nothing and a clip that lands
 * while credits are short is kept for retry start, so both are bounded.
 *
 * - Unused, unexpired links per key: PENDING_UPLOADS_PER_KEY (429 `too_many_pending_uploads`).
 * - Landed-but-unpaid clips per account: UNPAID_CLIPS_MAX_COUNT and UNPAID_CLIPS_MAX_BYTES
 *   (429 `unpaid_clips_limit`), each kept UNPAID_CLIP_RETENTION (the sweeper expires them).
 *
 * Both answers carry Retry-After: the time until the oldest link or unpaid clip expires, when
 * room comes back by itself. Checks that must not be raced (two link requests, two landings at
 * once) take a transaction-scoped advisory lock on the key or the account first.
 */
import { Context, Duration, Effect, Layer } from "effect"
import { HttpEffect, HttpServerResponse } from "effect/http"
import { TooManyPendingUploads, UnpaidClipsLimit } from "../Errors.js"
import { Ledger } from "../Ledger/Ledger.js"
import { PredictionsConfig } from "./Config.js"
import { currentDate } from "../Repository.js"
import { UploadsRepo } from "./UploadsRepo.js"

/** Retry-After on the answer of the request being served; nothing outside a request (the presigned watcher). */
const retryAfter = (seconds: number) =>
  Effect.withFiber((fiber) => {
    HttpEffect.appendPreResponseHandlerUnsafe(fiber.context, (_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(Math.max(1, Math.ceil(seconds))))))
    return Effect.void
  })

const mib = (bytes: number) => `${Math.round((bytes / (1024 * 1024)) * 10) / 10} MiB`

interface UnpaidClips {
  readonly clips: number
  readonly bytes: number
  /** Seconds until the oldest of them expires (0 when there are none). */
  readonly freesInSec: number
}

/** The free-hold bounds, each checked where it applies (429 with Retry-After when over). */
export interface UploadQuotasService {
  /** Before an upload link is made: the key's unused links (PENDING_UPLOADS_PER_KEY) and the account's unpaid clips. */
  readonly admitLink: (accountId: string, keyId: string) => Effect.Effect<void, TooManyPendingUploads | UnpaidClipsLimit>
  /** Before an upload is read: whether a clip of `declaredBytes` could still land unpaid when credits are short. */
  readonly admitPut: (accountId: string, declaredBytes: number, clipCredits: number) => Effect.Effect<void, UnpaidClipsLimit>
  /** Inside the landing transaction of an unpaid clip: fails (rolling it back) when the account now keeps too many. */
  readonly checkLandedUnpaid: (accountId: string) => Effect.Effect<void, UnpaidClipsLimit>
}

const make = Effect.gen(function*() {
  const ledger = yield* Ledger
  const repo = yield* UploadsRepo
  const config = yield* PredictionsConfig
  const unpaidRetentionSec = Duration.toMillis(config.unpaidRetention) / 1000

  const unpaidClips = (accountId: string) =>
    Effect.flatMap(currentDate, (now) => repo.unpaidClips({ accountId, retentionSec: unpaidRetentionSec, now }))

  const unpaidLimit = (unpaid: UnpaidClips, extraBytes: number) =>
    retryAfter(unpaid.freesInSec).pipe(Effect.andThen(Effect.fail(
      new UnpaidClipsLimit({
        message: `This account keeps ${unpaid.clips} clip(s) (${mib(unpaid.bytes + extraBytes)}) waiting for credits, ` +
          `the most allowed is ${config.unpaidMaxCount} clips or ${mib(config.unpaidMaxBytes)}: top up and retry start ` +
          `them (POST /v1/predict), or retry after the oldest expires.`
      })
    )))

  const overBound = (unpaid: UnpaidClips, extraClips: number, extraBytes: number) =>
    unpaid.clips + extraClips > config.unpaidMaxCount || unpaid.bytes + extraBytes > config.unpaidMaxBytes

  /**
   * Before a link is made, inside its transaction: the key's unused links and the account's
   * unpaid clips must leave room.
   */
  const admitLink = (accountId: string, keyId: string) =>
    Effect.gen(function*() {
      yield* repo.lockKeyLinks(keyId)
      const pending = yield* repo.pendingLinks({ keyId, now: yield* currentDate })
      if (pending.links >= config.pendingUploadsPerKey) {
        yield* retryAfter(pending.freesInSec)
        return yield* new TooManyPendingUploads({
          message: `This key holds ${pending.links} unused upload links, the most allowed: ` +
            `upload to them, or retry after the oldest expires.`
        })
      }
      const unpaid = yield* unpaidClips(accountId)
      if (overBound(unpaid, 1, 0) || unpaid.bytes >= config.unpaidMaxBytes) return yield* unpaidLimit(unpaid, 0)
    })

  /**
   * Before a PUT streams: a wallet that cannot pay would make this clip unpaid, so it must fit
   * beside the unpaid ones (by its declared length; a chunked body is checked when it lands).
   */
  const admitPut = (accountId: string, declaredBytes: number, clipCredits: number) =>
    Effect.gen(function*() {
      const wallet = yield* ledger.wallet(accountId)
      if (wallet.monthly + wallet.topup >= clipCredits) return
      const unpaid = yield* unpaidClips(accountId)
      if (overBound(unpaid, 1, declaredBytes)) return yield* unpaidLimit(unpaid, declaredBytes)
    })

  /**
   * When a clip has landed unpaid, inside the landing transaction (the clip itself already
   * counted): fails when the account now keeps more than allowed, which rolls the landing back.
   */
  const checkLandedUnpaid = (accountId: string) =>
    Effect.gen(function*() {
      yield* repo.lockUnpaidClips(accountId)
      const unpaid = yield* unpaidClips(accountId)
      if (overBound(unpaid, 0, 0)) return yield* unpaidLimit(unpaid, 0)
    })

  return UploadQuotas.of({ admitLink, admitPut, checkLandedUnpaid })
})

export class UploadQuotas extends Context.Service<UploadQuotas, UploadQuotasService>()("hookline/UploadQuotas") {
  static readonly layer = Layer.effect(UploadQuotas, make).pipe(Layer.provide([Ledger.layer, UploadsRepo.layer]))
}
