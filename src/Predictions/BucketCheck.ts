/**
 * Whether the configured S3 credentials can do what Hookline does with the bucket: write, read,
 * list and delete objects under `uploads/` (the links' objects, the watcher's listing) and `jobs/`
 * (the copies the workers score). A bucket that fails one of these does not fail loudly on its
 * own: a presigned PUT still lands, and then nothing lists it. So the check runs when the server
 * starts and every S3_CHECK_INTERVAL; while it fails, /readyz answers 503 with the message,
 * which names the operation and the S3 permission it needs (`s3:ListBucket`, …), and
 * `hookline_blob_store_ready` is 0. The check's objects are `<prefix>access-check-<random>`, which
 * no link or job uses, written and deleted each time.
 */
import { Cause, Config, Context, Duration, Effect, Exit, Layer, Option, Redacted, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import { recordBlobStoreCheck, recordUploadWatch } from "../Observability/Metrics.js"
import { BlobConfig } from "./Config.js"

export const BucketCheckConfig = Config.all({
  interval: Config.Duration("S3_CHECK_INTERVAL").pipe(Config.withDefault(Duration.seconds(30))),
  timeout: Config.Duration("S3_CHECK_TIMEOUT").pipe(Config.withDefault(Duration.seconds(10)))
})

/** The bucket's client when S3_BUCKET is set (Bun's S3 client, the S3_* settings). */
export const s3ClientOf = (config: BlobConfig): Option.Option<{ readonly bucket: string; readonly client: Bun.S3Client }> =>
  Option.map(config.s3Bucket, (bucket) => ({
    bucket,
    client: new Bun.S3Client({
      bucket,
      endpoint: Option.getOrUndefined(config.s3Endpoint),
      region: Option.getOrUndefined(config.s3Region),
      accessKeyId: Option.getOrUndefined(Option.map(config.s3AccessKeyId, Redacted.value)),
      secretAccessKey: Option.getOrUndefined(Option.map(config.s3SecretAccessKey, Redacted.value))
    })
  }))

/** The prefixes Hookline writes: presigned links' objects and the jobs' own copies. */
const prefixes = ["uploads/", "jobs/"] as const

/** An S3 error's code (AccessDenied, SignatureDoesNotMatch, NoSuchBucket…), else its message. */
export const describeStoreError = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "code" in error && typeof error.code === "string" && error.code !== "UnknownError") {
    return error.code
  }
  return error instanceof Error ? error.message : String(error)
}

interface Step {
  readonly what: string
  readonly permission: string
  readonly run: () => Promise<unknown>
}

const stepsFor = (client: Bun.S3Client, prefix: string, key: string, body: string): ReadonlyArray<Step> => [
  { what: "write", permission: "s3:PutObject", run: () => client.write(key, body) },
  {
    what: "read",
    permission: "s3:GetObject",
    run: async () => {
      if ((await client.file(key).text()) !== body) throw new Error("the object read back differs from the one written")
    }
  },
  // The watcher's own call: a page of the folder.
  { what: "list", permission: "s3:ListBucket", run: () => client.list({ prefix, maxKeys: 1 }) },
  { what: "delete", permission: "s3:DeleteObject", run: () => client.delete(key) }
]

/** Runs the check once: null when every operation works, else what failed and the permission it needs. */
const checkBucketAccess = (client: Bun.S3Client, bucket: string): Effect.Effect<string | null> =>
  Effect.promise(async () => {
    const id = randomUUID().replaceAll("-", "")
    for (const prefix of prefixes) {
      const key = `${prefix}access-check-${id}`
      for (const step of stepsFor(client, prefix, key, `hookline access check ${id}`)) {
        try {
          await step.run()
        } catch (error) {
          // Whatever was written goes, if the credentials allow it.
          await client.delete(key).catch(() => undefined)
          return `S3 bucket ${bucket}: cannot ${step.what} objects under ${prefix} (needs ${step.permission}): ${describeStoreError(error)}`
        }
      }
    }
    return null
  })

/** The bucket's access check: run by the background, read by /readyz and the upload links. */
export interface BucketAccessService {
  /** With S3: the check now and every S3_CHECK_INTERVAL, for as long as the process runs (the background's); never fails. */
  readonly checkForever: Effect.Effect<void>
  /** What the last check found failing, or null (also without S3): /readyz answers 503 with it. */
  readonly problem: () => string | null
}

const make = Effect.gen(function*() {
  const config = yield* BucketCheckConfig
  const bucket = s3ClientOf(yield* BlobConfig)
  let problem: string | null = null

  const checkOnce = (client: Bun.S3Client, name: string) =>
    checkBucketAccess(client, name).pipe(Effect.timeoutOrElse({
      duration: config.timeout,
      orElse: () => Effect.succeed(`S3 bucket ${name}: the access check did not finish within ${Duration.format(config.timeout)}`)
    }))

  /** Runs the check and keeps its answer; a change is logged once (the error names what fails). */
  const refresh = Option.match(bucket, {
    onNone: () => Effect.void,
    onSome: ({ bucket: name, client }) =>
      Effect.flatMap(checkOnce(client, name), (found) => {
        const before = problem
        problem = found
        recordBlobStoreCheck(found === null)
        if (found !== null && found !== before) return Effect.logError(`clip store check failed: ${found}`)
        if (found === null && before !== null) return Effect.logInfo("clip store check passes again")
        return Effect.void
      })
  })

  return BucketAccess.of({
    checkForever: Option.isSome(bucket) ? refresh.pipe(Effect.repeat(Schedule.spaced(config.interval)), Effect.asVoid) : Effect.void,
    problem: () => problem
  })
})

/** The bucket's access, checked by the background (PredictionsSweeperLive) and read by /readyz. */
export class BucketAccess extends Context.Service<BucketAccess, BucketAccessService>()("hookline/BucketAccess") {
  static readonly layer = Layer.effect(BucketAccess, make)
}

/** The presigned-upload watcher's longest wait between failed rounds: the `maxBackoff` Sweeper.ts gives `watchWithBackoff`. */
export const UploadWatchMaxBackoff = Config.Duration("S3_UPLOAD_WATCH_MAX_BACKOFF").pipe(Config.withDefault(Duration.minutes(1)))

/**
 * The presigned-upload watcher's loop (Sweeper.ts): `round` every `interval`; after a failed round
 * the next waits twice as long as the last, up to `maxBackoff`, with one warning per failed round
 * and one line once a round works again. `hookline_upload_watch_failing_rounds` counts the
 * failures in a row.
 */
export const watchWithBackoff = <R>(round: Effect.Effect<void, unknown, R>, interval: Duration.Duration, maxBackoff: Duration.Duration) =>
  Effect.gen(function*() {
    let failed = 0
    for (;;) {
      const exit = yield* Effect.exit(round)
      if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return yield* Effect.interrupt
      if (Exit.isSuccess(exit)) {
        if (failed > 0) yield* Effect.logInfo(`watching presigned uploads works again after ${failed} failed rounds`)
        failed = 0
        recordUploadWatch(0)
        yield* Effect.sleep(interval)
        continue
      }
      failed++
      recordUploadWatch(failed)
      const wait = Duration.min(Duration.times(interval, 2 ** Math.min(failed, 30)), maxBackoff)
      yield* Effect.logWarning(`watching presigned uploads failed ${failed} times in a row; next round in ${Duration.format(wait)}`).pipe(
        Effect.annotateLogs({ error: describeStoreError(Cause.squash(exit.cause)), failed_rounds: failed, next_round_ms: Duration.toMillis(wait) })
      )
      yield* Effect.sleep(wait)
    }
  })
