/**
 * Every statement on the uploads table. An upload link's own states:
 *
 *   pending ──PUT claims it (claimByToken / claimStoredObject)──▶ receiving ──file stored──▶ received
 *     │  ▲                                                          │
 *     │  └──── the PUT failed (releaseClaim) or its process died ───┘ (releaseStalledReceive)
 *     └─ expires_at passed unused (expireLink) ─▶ expired
 *
 * Times come from the caller (Effect's Clock), never from the database's now().
 */
import { Context, Effect, Layer, type Option, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import { atRepoBoundary } from "../Repository.js"
import { moved, UploadRow } from "./Rows.js"

const Now = Schema.Date
const UploadStatus = Schema.Literals(["pending", "receiving", "received", "expired"])

export const NewUploadLink = Schema.Struct({
  predictionId: Schema.String,
  uploadId: Schema.String,
  accountId: Schema.String,
  keyId: Schema.String,
  tokenHash: Schema.String,
  blobKey: Schema.String,
  now: Now,
  expiresAt: Now
})

export const Landing = Schema.Struct({
  id: Schema.String,
  sizeBytes: Schema.Number,
  kind: Schema.NullOr(Schema.String),
  blobKey: Schema.String,
  now: Now
})

const UploadRef = Schema.Struct({ id: Schema.String, prediction_id: Schema.String, blob_key: Schema.NullOr(Schema.String) })
const Scan = Schema.Struct({ before: Now, limit: Schema.Number })
type UploadStatus = typeof UploadStatus.Type

/** The statements on `uploads`, as the uploads and jobs services, the sweeper, the quotas and the tests' in-memory twin use them. */
export interface UploadsRepoService {
  /** The job (awaiting_upload) and its link, created together. */
  readonly createUploadLink: (link: typeof NewUploadLink.Type) => Effect.Effect<void>
  /** The link of a token; `expired` also when its key was revoked or its account suspended. */
  readonly findByToken: (request: { readonly tokenHash: string; readonly now: Date }) => Effect.Effect<Option.Option<UploadRow>>
  /** pending → receiving, before a byte is stored: of two PUTs at once exactly one streams (true). */
  readonly claimByToken: (request: { readonly tokenHash: string; readonly now: Date }) => Effect.Effect<boolean>
  /** Presigned uploads: pending → receiving for a link whose object is in the bucket. */
  readonly claimStoredObject: (
    request: { readonly id: string; readonly now: Date }
  ) => Effect.Effect<Option.Option<{ readonly id: string; readonly prediction_id: string; readonly blob_key: string }>>
  /** receiving → received, the file complete under `blobKey`; false when the upload was not receiving. */
  readonly landUpload: (landing: typeof Landing.Type) => Effect.Effect<boolean>
  /** receiving → pending: the PUT failed, the caller may try again. */
  readonly releaseClaim: (id: string) => Effect.Effect<void>
  /** Pending links whose time was up at `before`, soonest first. */
  readonly findLinksDue: (scan: typeof Scan.Type) => Effect.Effect<ReadonlyArray<{ readonly id: string; readonly blob_key: string | null }>>
  /** pending → expired, once its time is up; the job to fail. */
  readonly expireLink: (request: { readonly id: string; readonly now: Date }) => Effect.Effect<Option.Option<{ readonly prediction_id: string }>>
  /** PUTs receiving since at or before `before`. */
  readonly findStalledReceives: (scan: typeof Scan.Type) => Effect.Effect<ReadonlyArray<typeof UploadRef.Type>>
  /** receiving → pending (or expired when its time is up): the PUT's process died mid-stream. */
  readonly releaseStalledReceive: (
    request: { readonly id: string; readonly startedBefore: Date; readonly now: Date }
  ) => Effect.Effect<Option.Option<{ readonly status: UploadStatus; readonly prediction_id: string }>>
  /** Stored files of a job that is terminal. */
  readonly findTerminalFiles: (predictionId: string) => Effect.Effect<ReadonlyArray<{ readonly id: string; readonly blob_key: string }>>
  /** The upload no longer names the file (deleted); nothing when it names another by now. */
  readonly forgetFile: (request: { readonly id: string; readonly blobKey: string }) => Effect.Effect<void>
  /** Up to `limit` terminal jobs that still have a stored file. */
  readonly findLeftoverFiles: (limit: number) => Effect.Effect<ReadonlyArray<{ readonly prediction_id: string }>>
  /** The uploads of these ids that exist (the presigned-upload watcher's lookup of the bucket's objects). */
  readonly findByIds: (
    ids: ReadonlyArray<string>
  ) => Effect.Effect<ReadonlyArray<{ readonly id: string; readonly status: UploadStatus; readonly blob_key: string | null }>>
  /** The key's unused, unexpired links, and seconds until the oldest expires. */
  readonly pendingLinks: (
    request: { readonly keyId: string; readonly now: Date }
  ) => Effect.Effect<{ readonly links: number; readonly freesInSec: number }>
  /** The account's landed, unpaid clips, and seconds until the oldest is expired (kept `retentionSec`). */
  readonly unpaidClips: (
    request: { readonly accountId: string; readonly retentionSec: number; readonly now: Date }
  ) => Effect.Effect<{ readonly clips: number; readonly bytes: number; readonly freesInSec: number }>
  /** Serialises the link requests of one key until the transaction ends. */
  readonly lockKeyLinks: (keyId: string) => Effect.Effect<void>
  /** Serialises the landings of one account's unpaid clips until the transaction ends. */
  readonly lockUnpaidClips: (accountId: string) => Effect.Effect<void>
}

/** A link made, claimed by one PUT, landed or released. */
const linkStatements = (sql: SqlClient.SqlClient) => {
  const createUploadLink = SqlSchema.void({
    Request: NewUploadLink,
    execute: (link) =>
      sql`INSERT INTO predictions (id, account_id, key_id, status, created_at)
          VALUES (${link.predictionId}, ${link.accountId}, ${link.keyId}, 'awaiting_upload', ${link.now})`.pipe(
        Effect.andThen(sql`
          INSERT INTO uploads (id, prediction_id, account_id, key_id, token_hash, expires_at, blob_key, created_at)
          VALUES (${link.uploadId}, ${link.predictionId}, ${link.accountId}, ${link.keyId}, ${link.tokenHash},
                  ${link.expiresAt}, ${link.blobKey}, ${link.now})`)
      )
  })

  /** A link dies with its key or a suspended account, as well as with time. */
  const findByToken = SqlSchema.findOneOption({
    Request: Schema.Struct({ tokenHash: Schema.String, now: Now }),
    Result: UploadRow,
    execute: ({ now, tokenHash }) =>
      sql`SELECT u.id, u.prediction_id, u.account_id, u.status, u.blob_key,
                 u.expires_at <= ${now} OR k.revoked_at IS NOT NULL OR a.suspended AS expired
            FROM uploads u JOIN api_keys k ON k.id = u.key_id JOIN accounts a ON a.id = u.account_id
           WHERE u.token_hash = ${tokenHash}`
  })

  /** pending → receiving, before a byte is stored: of two PUTs at once exactly one streams. */
  const claimByToken = SqlSchema.findOneOption({
    Request: Schema.Struct({ tokenHash: Schema.String, now: Now }),
    Result: Schema.Struct({ id: Schema.String }),
    execute: ({ now, tokenHash }) =>
      sql`UPDATE uploads SET status = 'receiving', receiving_started_at = ${now}
           WHERE token_hash = ${tokenHash} AND status = 'pending' AND expires_at > ${now}
          RETURNING id`
  })

  const claimStoredObject = SqlSchema.findOneOption({
    Request: Schema.Struct({ id: Schema.String, now: Now }),
    Result: Schema.Struct({ id: Schema.String, prediction_id: Schema.String, blob_key: Schema.String }),
    execute: ({ id, now }) =>
      sql`UPDATE uploads SET status = 'receiving', receiving_started_at = ${now}
           WHERE id = ${id} AND status = 'pending' AND blob_key IS NOT NULL
          RETURNING id, prediction_id, blob_key`
  })

  /** receiving → received, the file complete under `blobKey`. */
  const landUpload = SqlSchema.findOneOption({
    Request: Landing,
    Result: Schema.Struct({ id: Schema.String }),
    execute: (landing) =>
      sql`UPDATE uploads
             SET status = 'received', size_bytes = ${landing.sizeBytes}, media_kind = ${landing.kind},
                 received_at = ${landing.now}, blob_key = ${landing.blobKey}
           WHERE id = ${landing.id} AND status = 'receiving'
          RETURNING id`
  })

  const releaseClaim = SqlSchema.void({
    Request: Schema.String,
    execute: (id) =>
      sql`UPDATE uploads SET status = 'pending', receiving_started_at = NULL WHERE id = ${id} AND status = 'receiving'`
  })

  return {
    createUploadLink,
    findByToken,
    claimByToken: (request: Parameters<typeof claimByToken>[0]) => moved(claimByToken(request)),
    claimStoredObject,
    landUpload: (landing: typeof Landing.Type) => moved(landUpload(landing)),
    releaseClaim
  }
}

/** What the sweeper expires or releases. */
const sweepStatements = (sql: SqlClient.SqlClient) => {
  const findLinksDue = SqlSchema.findAll({
    Request: Scan,
    Result: Schema.Struct({ id: Schema.String, blob_key: Schema.NullOr(Schema.String) }),
    execute: ({ before, limit }) =>
      sql`SELECT id, blob_key FROM uploads WHERE status = 'pending' AND expires_at <= ${before} ORDER BY expires_at LIMIT ${limit}`
  })

  /** pending → expired, once its time is up; returns the job to fail. */
  const expireLink = SqlSchema.findOneOption({
    Request: Schema.Struct({ id: Schema.String, now: Now }),
    Result: Schema.Struct({ prediction_id: Schema.String }),
    execute: ({ id, now }) =>
      sql`UPDATE uploads SET status = 'expired' WHERE id = ${id} AND status = 'pending' AND expires_at <= ${now}
          RETURNING prediction_id`
  })

  const findStalledReceives = SqlSchema.findAll({
    Request: Scan,
    Result: UploadRef,
    execute: ({ before, limit }) =>
      sql`SELECT id, prediction_id, blob_key FROM uploads
           WHERE status = 'receiving' AND receiving_started_at <= ${before} LIMIT ${limit}`
  })

  const releaseStalledReceive = SqlSchema.findOneOption({
    Request: Schema.Struct({ id: Schema.String, startedBefore: Now, now: Now }),
    Result: Schema.Struct({ status: UploadStatus, prediction_id: Schema.String }),
    execute: ({ id, now, startedBefore }) =>
      sql`UPDATE uploads
             SET status = CASE WHEN expires_at > ${now} THEN 'pending' ELSE 'expired' END, receiving_started_at = NULL
           WHERE id = ${id} AND status = 'receiving' AND receiving_started_at <= ${startedBefore}
          RETURNING status, prediction_id`
  })

  return {
    findLinksDue,
    expireLink,
    findStalledReceives,
    releaseStalledReceive
  }
}

/** The stored files: which to delete, and which objects a link may keep. */
const fileStatements = (sql: SqlClient.SqlClient) => {
  const findTerminalFiles = SqlSchema.findAll({
    Request: Schema.String,
    Result: Schema.Struct({ id: Schema.String, blob_key: Schema.String }),
    execute: (predictionId) =>
      sql`SELECT u.id, u.blob_key FROM uploads u JOIN predictions p ON p.id = u.prediction_id
           WHERE u.prediction_id = ${predictionId} AND u.blob_key IS NOT NULL AND p.status IN ('succeeded', 'failed')`
  })

  const forgetFile = SqlSchema.void({
    Request: Schema.Struct({ id: Schema.String, blobKey: Schema.String }),
    execute: ({ blobKey, id }) => sql`UPDATE uploads SET blob_key = NULL WHERE id = ${id} AND blob_key = ${blobKey}`
  })

  const findLeftoverFiles = SqlSchema.findAll({
    Request: Schema.Number,
    Result: Schema.Struct({ prediction_id: Schema.String }),
    execute: (limit) =>
      sql`SELECT u.prediction_id FROM uploads u JOIN predictions p ON p.id = u.prediction_id
           WHERE u.blob_key IS NOT NULL AND p.status IN ('succeeded', 'failed') LIMIT ${limit}`
  })

  const findByIds = SqlSchema.findAll({
    Request: Schema.Array(Schema.String),
    Result: Schema.Struct({ id: Schema.String, status: UploadStatus, blob_key: Schema.NullOr(Schema.String) }),
    execute: (ids) => sql`SELECT id, status, blob_key FROM uploads WHERE id IN ${sql.in(ids)}`
  })

  return {
    findTerminalFiles,
    forgetFile,
    findLeftoverFiles,
    findByIds
  }
}

/** What UploadQuotas counts. */
const quotaStatements = (sql: SqlClient.SqlClient) => {
  const pendingLinks = SqlSchema.findOne({
    Request: Schema.Struct({ keyId: Schema.String, now: Now }),
    Result: Schema.Struct({ links: Schema.Number, freesInSec: Schema.Number }),
    execute: ({ keyId, now }) =>
      sql`SELECT count(*)::int AS links, COALESCE(EXTRACT(EPOCH FROM min(expires_at) - ${now}::timestamptz), 0)::float8 AS "freesInSec"
            FROM uploads WHERE key_id = ${keyId} AND status = 'pending' AND expires_at > ${now}`
  })

  const unpaidClips = SqlSchema.findOne({
    Request: Schema.Struct({ accountId: Schema.String, retentionSec: Schema.Number, now: Now }),
    Result: Schema.Struct({ clips: Schema.Number, bytes: Schema.Number, freesInSec: Schema.Number }),
    execute: ({ accountId, now, retentionSec }) =>
      sql`SELECT count(*)::int AS clips, COALESCE(sum(u.size_bytes), 0)::float8 AS bytes,
                 COALESCE(EXTRACT(EPOCH FROM min(u.received_at) + make_interval(secs => ${retentionSec}) - ${now}::timestamptz), 0)::float8
                   AS "freesInSec"
            FROM predictions p JOIN uploads u ON u.prediction_id = p.id
           WHERE p.account_id = ${accountId} AND p.status = 'awaiting_upload' AND u.status = 'received'`
  })

  /** Advisory lock classes (first key of the two-key form), so they never meet another area's locks. */
  const pendingLinksLock = 14_006
  const unpaidClipsLock = 14_004

  return {
    pendingLinks,
    unpaidClips,
    lockKeyLinks: (keyId: string) => Effect.asVoid(sql`SELECT pg_advisory_xact_lock(${pendingLinksLock}, hashtext(${keyId}))`),
    lockUnpaidClips: (accountId: string) =>
      Effect.asVoid(sql`SELECT pg_advisory_xact_lock(${unpaidClipsLock}, hashtext(${accountId}))`)
  }
}

const make = Effect.map(SqlClient.SqlClient, (sql) =>
  UploadsRepo.of(atRepoBoundary("UploadsRepo", {
    ...linkStatements(sql),
    ...sweepStatements(sql),
    ...fileStatements(sql),
    ...quotaStatements(sql)
  })))

export class UploadsRepo extends Context.Service<UploadsRepo, UploadsRepoService>()("hookline/UploadsRepo") {
  static readonly layer = Layer.effect(UploadsRepo, make)
}
