/**
 * Where uploaded clips live until their job is terminal. Two implementations behind one
 * interface: the local file system under DATA_DIR/blobs (default) and an S3-compatible bucket
 * through Bun's built-in S3 client (when S3_BUCKET is set).
 *
 * A `put` is atomic: after success the whole object exists under its key, after failure or
 * interruption nothing does. Storage I/O errors are defects (the caller's job or request fails).
 */
import { Context, Duration, Effect, Exit, Layer, Option, Stream } from "effect"
import { randomUUID } from "node:crypto"
import { mkdir, open, readdir, rename, rm, stat } from "node:fs/promises"
import { dirname, join } from "node:path"
import { ServerConfig } from "../Config.js"
import { wholeSeconds } from "../Durations.js"
import { BucketAccess, s3ClientOf } from "./BucketCheck.js"
import { BlobConfig } from "./Config.js"

export interface BlobStoreApi {
  readonly kind: "file" | "s3"
  /** Streams `body` into `key` with constant memory. */
  readonly put: <E, R>(key: string, body: Stream.Stream<Uint8Array, E, R>) => Effect.Effect<{ readonly sizeBytes: number }, E, R>
  /** The object's size, or None when it does not exist. */
  readonly size: (key: string) => Effect.Effect<Option.Option<number>>
  /** The first `maxBytes` bytes as a stream (read errors are defects). */
  readonly read: (key: string, maxBytes: number) => Stream.Stream<Uint8Array>
  /** Keys of the objects under `prefix` (a folder: ends with "/"), in key order. */
  readonly list: (prefix: string) => Effect.Effect<ReadonlyArray<string>>
  /** Runs `use` with a local path holding the object (a temporary copy for remote stores). */
  readonly withLocalFile: <A, E, R>(key: string, use: (path: string) => Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Deletes the object (and any partial write of it); no error when it does not exist. */
  readonly remove: (key: string) => Effect.Effect<void>
  /** Remote stores in presigned mode: a URL the client PUTs the file to directly. */
  readonly presignedPut: Option.Option<(key: string, expiresIn: Duration.Duration) => string>
}

const validKey = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_-]+)*$/

const checkKey = (key: string) =>
  validKey.test(key) ? Effect.void : Effect.die(new Error(`Invalid blob key ${JSON.stringify(key)}`))

const writeAll = <E, R>(body: Stream.Stream<Uint8Array, E, R>, write: (chunk: Uint8Array) => Promise<unknown>) =>
  Stream.runFoldEffect(body, () => 0, (written, chunk) =>
    Effect.promise(() => write(chunk)).pipe(Effect.as(written + chunk.length)))

const fileStore = (root: string): BlobStoreApi => {
  const pathOf = (key: string) => join(root, key)
  const partialOf = (key: string) => `${pathOf(key)}.part`

  const remove = (key: string) =>
    checkKey(key).pipe(
      Effect.andThen(Effect.promise(() => Promise.all([rm(pathOf(key), { force: true }), rm(partialOf(key), { force: true })]))),
      Effect.asVoid
    )

  return {
    kind: "file",
    // Written to `<key>.part`, renamed into place once complete; one writer per key at a time
    // (the upload's claim guarantees it).
    put: (key, body) =>
      Effect.gen(function*() {
        yield* checkKey(key)
        const partial = partialOf(key)
        yield* Effect.promise(() => mkdir(dirname(partial), { recursive: true }))
        const sizeBytes = yield* Effect.acquireUseRelease(
          Effect.promise(() => open(partial, "w")),
          (handle) => writeAll(body, (chunk) => handle.write(chunk)),
          (handle) => Effect.promise(() => handle.close())
        ).pipe(
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Effect.promise(() => rm(partial, { force: true })))
        )
        yield* Effect.promise(() => rename(partial, pathOf(key)))
        return { sizeBytes }
      }),
    size: (key) =>
      checkKey(key).pipe(
        Effect.andThen(Effect.promise(() => stat(pathOf(key)).then((s) => Option.some(s.size), () => Option.none())))
      ),
    read: (key, maxBytes) =>
      Stream.unwrap(checkKey(key).pipe(Effect.as(
        Stream.fromReadableStream({ evaluate: () => Bun.file(pathOf(key)).slice(0, maxBytes).stream(), onError: (error) => error }).pipe(Stream.orDie)
      ))),
    list: (prefix) =>
      Effect.promise(() =>
        readdir(pathOf(prefix), { withFileTypes: true }).then(
          (entries) => entries.filter((e) => e.isFile() && !e.name.endsWith(".part")).map((e) => prefix + e.name).sort(),
          () => []
        )
      ),
    // Every process that scores must see the same DATA_DIR; a missing file is a deployment fault.
    withLocalFile: (key, use) =>
      checkKey(key).pipe(
        Effect.andThen(Effect.promise(() => stat(pathOf(key)).then(() => true, () => false))),
        Effect.flatMap((present) =>
          present
            ? use(pathOf(key))
            : Effect.die(new Error(`Stored clip ${key} is missing from ${root} (is DATA_DIR shared by every server process?)`)))
      ),
    remove,
    presignedPut: Option.none()
  }
}

const s3Store = (client: Bun.S3Client, tmpDir: string, presigned: boolean): BlobStoreApi => {
  const remove = (key: string) => checkKey(key).pipe(Effect.andThen(Effect.promise(() => client.delete(key))))
  return {
    kind: "s3",
    // Bun's writer sends multipart parts as they fill, so memory stays at partSize × queueSize.
    put: (key, body) =>
      Effect.gen(function*() {
        yield* checkKey(key)
        const writer = client.file(key).writer({ partSize: 8 * 1024 * 1024, queueSize: 2, retry: 3 })
        const sizeBytes = yield* writeAll(body, async (chunk) => await writer.write(chunk)).pipe(
          Effect.onExit((exit) =>
            Exit.isSuccess(exit)
              ? Effect.void
              : Effect.promise(async () => {
                await Promise.resolve(writer.end(new Error("upload aborted"))).catch(() => undefined)
                await client.delete(key).catch(() => undefined)
              })
          )
        )
        yield* Effect.promise(async () => await writer.end())
        return { sizeBytes }
      }),
    size: (key) =>
      checkKey(key).pipe(Effect.andThen(Effect.promise(async () =>
        (await client.exists(key)) ? Option.some(await client.size(key)) : Option.none()
      ))),
    read: (key, maxBytes) =>
      Stream.unwrap(checkKey(key).pipe(Effect.as(
        Stream.fromReadableStream({ evaluate: () => client.file(key).slice(0, maxBytes).stream(), onError: (error) => error }).pipe(Stream.orDie)
      ))),
    list: (prefix) =>
      Effect.promise(async () => {
        const keys: Array<string> = []
        let continuationToken: string | undefined
        do {
          const page = await client.list({ prefix, continuationToken })
          for (const object of page.contents ?? []) keys.push(object.key)
          continuationToken = page.isTruncated === true ? page.nextContinuationToken : undefined
        } while (continuationToken !== undefined)
        return keys
      }),
    // ffmpeg reads a local copy: seeking over HTTP would fetch the file several times.
    withLocalFile: (key, use) =>
      Effect.acquireUseRelease(
        checkKey(key).pipe(Effect.andThen(Effect.promise(async () => {
          await mkdir(tmpDir, { recursive: true })
          const path = join(tmpDir, randomUUID())
          await Bun.write(path, client.file(key))
          return path
        }))),
        use,
        (path) => Effect.promise(() => rm(path, { force: true }))
      ),
    remove,
    presignedPut: presigned
      ? Option.some((key, expiresIn) =>
        client.presign(key, { method: "PUT", expiresIn: wholeSeconds(expiresIn, 1) }))
      : Option.none()
  }
}

const make = Effect.gen(function*() {
  const server = yield* ServerConfig
  const config = yield* BlobConfig
  const store: BlobStoreApi = Option.match(s3ClientOf(config), {
    onNone: () => fileStore(join(server.dataDir, "blobs")),
    onSome: ({ client }) => s3Store(client, join(server.dataDir, "tmp"), config.s3UploadMode === "presigned")
  })
  return { ...store, watchInterval: config.s3WatchInterval }
})

export interface BlobStoreShape extends BlobStoreApi {
  /** Presigned mode: how often the watcher looks for objects that landed. */
  readonly watchInterval: Duration.Duration
}

export class BlobStore extends Context.Service<BlobStore, BlobStoreShape>()("hookline/BlobStore") {
  /** The store, and the state of its access check (BucketCheck.ts), which the background updates and /readyz reads. */
  static readonly layer = Layer.merge(Layer.effect(BlobStore, make), BucketAccess.layer)
}
