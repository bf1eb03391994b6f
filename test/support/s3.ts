/**
 * An S3-compatible store for tests that speaks the real protocol: `@20minutes/s3rver` (a
 * devDependency) in this process, on a random loopback port, its objects in a temporary directory,
 * the bucket created up front (`configureBuckets`). It checks SigV4 signatures, header and
 * presigned alike: a tampered signature, a wrong secret, a changed signed header or an expired
 * link get 403, as from S3.
 *
 * Three corrections to the server, kept here. First, for SigV4 it rebuilds the canonical URI from the
 * route's bucket and key, which drops a trailing slash. Bun's client lists a bucket with
 * `GET /clips/?list-type=2&…` and signs the path it sends, `/clips/`, as SigV4 prescribes (the
 * path as sent; S3 does not normalise it); the server checked the signature over `/clips` and
 * answered SignatureDoesNotMatch to every listing. The wrapper below hands the server's check
 * the path as sent for bucket-level requests; every other request is checked unchanged.
 * Second, it lists objects in directory order (`readdir`, unsorted), where S3 lists them in key
 * order (and its own `start-after` and page cut assume that order): the watcher lands a round's
 * uploads in the order they were made, and tests rely on that as on S3. Third, after a delete it
 * removes the folders the delete emptied (`rm -r`), racing a PUT into the same folder, which then
 * fails with InternalError or is removed with the folder; S3 has no folders, and here they stay.
 *
 * Two key pairs: the server's own (every permission) and one whose policy denies listing the
 * bucket, for the tests of a bucket the configured credentials cannot fully use.
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { createRequire } from "node:module"
import { rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"

const require = createRequire(import.meta.url)

interface KoaContext {
  readonly path: string
  readonly method: string
  readonly query: Record<string, string | undefined>
  readonly headers: Record<string, string | undefined>
  params: { bucket?: string; key?: string }
}
type Middleware = (ctx: KoaContext, next: () => Promise<unknown>) => Promise<unknown>

/** The server's directory walk, in S3's key order: a folder `a` stands for the keys `a/…`, an object file for its key. */
const utils = require("@20minutes/s3rver/lib/utils.js") as {
  walk: (dir: string, recurseFilter?: (path: string) => boolean) => Generator<string>
}
utils.walk = function* keyOrderWalk(dir, recurseFilter): Generator<string> {
  const entries = readdirSync(dir, { withFileTypes: true })
    .map((entry) => ({ entry, order: entry.isDirectory() ? `${entry.name}/` : entry.name.replace(/\._S3rver_[A-Za-z0-9.]+$/, "") }))
    .sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0))
  for (const { entry } of entries) {
    const path = `${dir}/${entry.name}`
    if (!entry.isDirectory()) yield path
    else if (recurseFilter === undefined || recurseFilter(path)) yield* keyOrderWalk(path, recurseFilter)
  }
}

/** The server's signature check, given the path as sent for a bucket-level request (`/clips/`). */
const authenticationPath = require.resolve("@20minutes/s3rver/lib/middleware/authentication.js")
const authentication = require(authenticationPath) as () => Middleware
require.cache[authenticationPath]!.exports = (): Middleware => {
  const check = authentication()
  return (ctx, next) => {
    const bucket = ctx.params.bucket
    if (bucket === undefined || ctx.params.key !== undefined || ctx.path !== `/${bucket}/`) return check(ctx, next)
    ctx.params.bucket = `${bucket}/`
    const restore = () => void (ctx.params.bucket = bucket)
    return check(ctx, () => {
      restore()
      return next()
    }).finally(restore)
  }
}

interface FilesystemStore {
  readonly getResourcePath: (bucket: string, key: string, resource: string) => string
  deleteObject: (bucket: string, key: string) => Promise<void>
}

interface S3rverInstance {
  readonly store: FilesystemStore
  readonly middleware: Array<Middleware>
  readonly run: () => Promise<{ readonly port: number }>
  readonly close: () => Promise<void>
}
const S3rver = require("@20minutes/s3rver") as new(options: Record<string, unknown>) => S3rverInstance
const S3Error = require("@20minutes/s3rver/lib/models/error.js") as new(code: string, message: string) => Error
const { DUMMY_ACCOUNT } = require("@20minutes/s3rver/lib/models/account.js") as {
  DUMMY_ACCOUNT: { createKeyPair: (accessKeyId: string, secretAccessKey: string) => void }
}

export interface Credentials {
  readonly accessKeyId: string
  readonly secretAccessKey: string
}

/** The server's own key pair (s3rver's built-in account): every permission. */
export const fullAccess: Credentials = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" }
/** A key pair whose policy denies s3:ListBucket (listing objects); everything else is allowed. */
export const cannotList: Credentials = { accessKeyId: "HOOKLINENOLIST", secretAccessKey: "hookline-no-list-secret" }
DUMMY_ACCOUNT.createKeyPair(cannotList.accessKeyId, cannotList.secretAccessKey)

const accessKeyOf = (ctx: KoaContext) =>
  /Credential=([^/]+)\//.exec(ctx.headers["authorization"] ?? "")?.[1] ?? ctx.query["X-Amz-Credential"]?.split("/")[0]

/** Denies listing to `cannotList`, as a bucket policy without s3:ListBucket would. */
const listPolicy: Middleware = (ctx, next) => {
  const listing = ctx.method === "GET" && /^\/[^/]+\/?$/.test(ctx.path) && ctx.query["list-type"] !== undefined
  if (listing && accessKeyOf(ctx) === cannotList.accessKeyId) throw new S3Error("AccessDenied", "Access Denied")
  return next()
}

export interface TestS3 {
  readonly endpoint: string
  readonly bucket: string
  /** The S3_* settings for a server using this store with `credentials` (full access by default). */
  readonly env: (credentials?: Credentials) => Record<string, string>
  /** Whether an object exists, and the keys under a prefix, asked over the protocol with full access. */
  readonly has: (key: string) => Promise<boolean>
  readonly keys: (prefix?: string) => Promise<Array<string>>
  readonly size: (key: string) => Promise<number>
  readonly bytes: (key: string) => Promise<Uint8Array>
  readonly stop: () => Promise<void>
}

export const startS3 = async (bucket = "clips"): Promise<TestS3> => {
  const directory = mkdtempSync(join(tmpdir(), "hookline-s3-"))
  const server = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory, configureBuckets: [{ name: bucket }] })
  server.middleware.unshift(listPolicy)
  const store = server.store
  store.deleteObject = async (bucket, key) => {
    await Promise.all(["object", "object.md5", "metadata.json"].map((resource) => rm(store.getResourcePath(bucket, key, resource), { force: true })))
  }
  const { port } = await server.run()
  const endpoint = `http://127.0.0.1:${port}`
  const client = new Bun.S3Client({ bucket, endpoint, region: "us-east-1", ...fullAccess })
  return {
    endpoint,
    bucket,
    env: (credentials = fullAccess) => ({
      S3_BUCKET: bucket,
      S3_ENDPOINT: endpoint,
      S3_REGION: "us-east-1",
      S3_ACCESS_KEY_ID: credentials.accessKeyId,
      S3_SECRET_ACCESS_KEY: credentials.secretAccessKey
    }),
    has: (key) => client.exists(key),
    size: (key) => client.size(key),
    bytes: async (key) => new Uint8Array(await client.file(key).arrayBuffer()),
    keys: async (prefix) => ((await client.list(prefix === undefined ? {} : { prefix })).contents ?? []).map((object) => object.key),
    stop: async () => {
      await server.close()
      rmSync(directory, { recursive: true, force: true })
    }
  }
}
