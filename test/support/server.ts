/**
 * A real Hookline server for tests: a fresh database on the local Postgres (127.0.0.1:5432,
 * or TEST_DATABASE_URL), the whole application layer on a random port, real HTTP.
 */
import { HttpServer } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { ConfigProvider, Context, Effect, Exit, Layer, Logger, LogLevel, Scope, type Tracer } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Pg from "pg"
import { appLayer } from "../../src/App.js"
import type { ClipScorer } from "../../src/Predictions/Scorer.js"

export const adminDatabaseUrl = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

/**
 * A pg pool for a test's own queries. Dropping a database WITH (FORCE) terminates its sessions
 * (57P01); an idle pooled client then emits "error", which must not crash the test process.
 */
export const testPool = (connectionString: string, max: number): Pg.Pool => {
  const pool = new Pg.Pool({ connectionString, max })
  pool.on("error", () => {})
  return pool
}

/** Creates an empty database and returns its URL. */
export const createDatabase = async (): Promise<string> => {
  const name = `hookline_test_${randomBytes(6).toString("hex")}`
  const admin = new Pg.Client({ connectionString: adminDatabaseUrl })
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  const url = new URL(adminDatabaseUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/**
 * Drops a test database. The pools that used it are closing as this runs (sql-pg gives its
 * `pool.end()` one second, then moves on); terminating a connection that is still ending makes
 * pg emit an "error" nobody listens to any more, an unhandled error in the test run. So wait
 * until the database has no sessions, and force the drop only if some remain after 15 s.
 */
export const dropDatabase = async (databaseUrl: string) => {
  const name = new URL(databaseUrl).pathname.slice(1)
  const admin = new Pg.Client({ connectionString: adminDatabaseUrl })
  await admin.connect()
  try {
    const deadline = Date.now() + 15_000
    while (Date.now() < deadline) {
      const { rows } = await admin.query<{ sessions: number }>(
        "SELECT count(*)::int AS sessions FROM pg_stat_activity WHERE datname = $1",
        [name]
      )
      if (rows[0].sessions === 0) break
      await Bun.sleep(50)
    }
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  } finally {
    await admin.end()
  }
}

/** The error envelope every non-2xx answer carries. */
export interface ErrorBody {
  readonly error: { readonly type: string; readonly message: string; readonly request_id: string }
}

/** A hook as listed by search and list (HookLean), as sent on the wire. */
export interface HookLeanBody {
  readonly id: string
  readonly text: string
  readonly platform: string
  readonly media_type: string | null
  readonly thumbnail_url: string | null
  readonly category: string | null
  readonly hook_duration_sec: number | null
  readonly published_at: string | null
}

/** A page of hooks from search or list, as sent on the wire. */
export interface HookPage {
  readonly object: "list"
  readonly data: ReadonlyArray<HookLeanBody>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

/** The answer to POST /v1/predict/upload: a prediction awaiting its clip and where to PUT it. */
export interface UploadLink {
  readonly upload_id: string
  readonly prediction_id: string
  readonly upload_url: string
  readonly expires_at: string
}

/** A prediction as sent on the wire (GET /v1/predict/{id}, POST /v1/predict, webhook event data). */
export interface PredictionBody {
  readonly object: "prediction"
  readonly id: string
  readonly status: "awaiting_upload" | "queued" | "running" | "succeeded" | "failed"
  readonly created_at: string
  readonly completed_at: string | null
  readonly input: { readonly duration_sec: number | null } | null
  readonly result: {
    readonly band: "low" | "medium" | "high"
    readonly hook_duration_sec: number | null
    readonly category: { readonly slug: string } | null
  } | null
  readonly error: { readonly type: string; readonly message: string } | null
}

/** A wallet as sent on the wire (GET /v1/wallet, an admin grant's answer). */
export interface WalletBody {
  readonly object: "wallet"
  readonly monthly_balance: number
  readonly monthly_period_end: string | null
  readonly topup_balance: number
}

/** An account as sent on the wire (the admin account routes). */
export interface AccountBody {
  readonly object: "account"
  readonly id: string
  readonly name: string | null
  readonly plan: string
  readonly api_access: boolean
  readonly suspended: boolean
  readonly monthly_grant: number
  readonly wallet: WalletBody
}

/** A new API key (POST /admin/accounts/{id}/keys): the plain key is in this answer only. */
export interface ApiKeyBody {
  readonly object: "api_key"
  readonly id: string
  readonly api_key: string
  readonly scopes: ReadonlyArray<string>
  readonly created_at: string
}

/** The answer to POST /admin/catalog/hooks. */
export interface ImportResult {
  readonly object: "import_result"
  readonly inserted: number
  readonly updated: number
  readonly rejected_count: number
  readonly rejected: ReadonlyArray<{ readonly index: number; readonly message: string }>
}

/** A full hook (GET /v1/hooks/{id}, HookRich), as sent on the wire. */
export interface HookRichBody extends HookLeanBody {
  readonly source_url: string | null
  readonly caption: string | null
  readonly duration_sec: number | null
  readonly summary: string | null
  readonly emotions: Readonly<Record<string, number>> | null
  readonly comment_themes: ReadonlyArray<{ readonly word: string; readonly count: number }> | null
  readonly metrics: unknown
  readonly creator: unknown
  readonly audio: unknown
}

/** The webhook configuration (/v1/webhooks): GET, DELETE, and a PUT of a webhook that already exists. */
export interface WebhookBody {
  readonly object: "webhook"
  readonly url: string | null
  readonly configured: boolean
  readonly events: ReadonlyArray<string>
  readonly disabled_reason: "gone" | "failing" | null
  readonly disabled_at: string | null
}

/** One row of the delivery log (/v1/webhooks/deliveries). */
export interface WebhookDeliveryBody {
  readonly object: "webhook_delivery"
  readonly id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: "pending" | "delivered" | "failed"
  readonly attempts: number
  readonly last_status_code: number | null
  readonly last_error: string | null
  readonly next_attempt_at: string | null
  readonly created_at: string
  readonly completed_at: string | null
}

export interface WebhookDeliveryPage {
  readonly object: "list"
  readonly data: ReadonlyArray<WebhookDeliveryBody>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

/** The webhook with a newly issued secret: the first PUT /v1/webhooks and POST /v1/webhooks/rotate. */
export interface WebhookSecretBody extends WebhookBody {
  readonly secret: string
}

/** The answer to POST /v1/webhooks/test. */
export interface WebhookTestBody {
  readonly object: "webhook_test"
  readonly delivered: boolean
  readonly status_code: number | null
  readonly event: "prediction.succeeded"
}

/** One change of a balance, as listed by the credit history. */
export interface TransactionBody {
  readonly object: "credit_transaction"
  readonly id: string
  readonly type: "grant" | "charge" | "refund" | "expiry"
  readonly bucket: "monthly" | "topup"
  readonly amount: number
  readonly balance_after: { readonly monthly: number; readonly topup: number }
  readonly created_at: string
  readonly request_id: string | null
  readonly reference: { readonly kind: string; readonly id: string | null }
}

/** A page of the credit history (/v1/wallet/transactions, /admin/accounts/{id}/transactions). */
export interface TransactionPage {
  readonly object: "list"
  readonly data: ReadonlyArray<TransactionBody>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

/** A webhook event: the signed body a receiver gets, and the payload the outbox stores. */
export interface WebhookEvent {
  readonly id: string
  readonly object: "event"
  readonly type: "prediction.succeeded" | "prediction.failed"
  readonly created_at: string
  readonly data: PredictionBody
}

/** The parts of an OpenAPI operation the tests read. */
export interface OpenApiOperation {
  readonly parameters?: ReadonlyArray<{ readonly name: string; readonly in: string; readonly required?: boolean }>
  readonly responses: Readonly<Record<string, { readonly headers?: Readonly<Record<string, unknown>> }>>
}

/** The parts of /openapi.json the tests read. */
export interface OpenApiDocument {
  readonly info: { readonly version: string }
  /** Path template → lower-case method → operation. */
  readonly paths: Readonly<Record<string, Readonly<Record<string, OpenApiOperation>>>>
  readonly components: {
    readonly schemas: Readonly<Record<string, { readonly properties?: Readonly<Record<string, unknown>> }>>
    readonly securitySchemes: Readonly<Record<string, unknown>>
  }
}

export interface Response<T = unknown> {
  readonly status: number
  readonly headers: Headers
  readonly body: T
}

export interface RequestOptions {
  readonly method?: string
  readonly key?: string
  readonly body?: unknown
  readonly rawBody?: BodyInit
  readonly headers?: Record<string, string>
}

export interface TestServer {
  readonly url: string
  readonly databaseUrl: string
  readonly adminToken: string
  readonly dataDir: string
  /** A pool on the server's database, for assertions on rows. */
  readonly db: Pg.Pool
  readonly request: <T = unknown>(path: string, options?: RequestOptions) => Promise<Response<T>>
  readonly admin: <T = unknown>(path: string, options?: Omit<RequestOptions, "key">) => Promise<Response<T>>
  /** A new account on `plan` with a key (all scopes unless given); returns both. */
  readonly account: (options?: {
    readonly plan?: string
    readonly monthly_balance?: number
    readonly topup_balance?: number
    readonly monthly_grant?: number
    readonly scopes?: ReadonlyArray<string>
  }) => Promise<{ readonly accountId: string; readonly key: string; readonly keyId: string }>
  readonly stop: () => Promise<void>
  readonly close: () => Promise<void>
}

/** Settings every test server uses unless a test overrides them. */
const testDefaults: Record<string, string> = {
  LOG_LEVEL: "Warning",
  RATE_LIMIT_FAILED_AUTH_PER_MINUTE: "100000",
  RATE_LIMIT_ENABLED: "false",
  SEED_DEMO: "false"
}

export const startTestServer = async (
  env: Record<string, string> = {},
  options: {
    readonly databaseUrl?: string
    /** Receives every span the server makes (the observability tests collect them). */
    readonly tracer?: Tracer.Tracer
    /** Replaces the default logger (the observability tests capture the lines). */
    readonly logger?: Logger.Logger<unknown, unknown>
    /** false: no background fibers (no worker claims rows a test inserts). Default true. */
    readonly background?: boolean
    /** Replaces the clip scorer the workers use (the predictions tests control it). */
    readonly scorer?: Layer.Layer<ClipScorer>
  } = {}
): Promise<TestServer> => {
  const databaseUrl = options.databaseUrl ?? (await createDatabase())
  const dataDir = mkdtempSync(join(tmpdir(), "hookline-test-"))
  const adminToken = `admin_${randomBytes(16).toString("hex")}`
  const settings = new Map(Object.entries({
    ...testDefaults,
    DATABASE_URL: databaseUrl,
    DATA_DIR: dataDir,
    ADMIN_TOKEN: adminToken,
    PORT: "0",
    HOST: "127.0.0.1",
    ...env
  }))
  const provider = ConfigProvider.fromMap(settings).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv()))
  const level = LogLevel.fromLiteral((settings.get("LOG_LEVEL") ?? "Warning") as LogLevel.Literal)
  const scope = Effect.runSync(Scope.make())
  const serverContext = await Effect.runPromise(
    Layer.buildWithScope(BunHttpServer.layer({ port: 0, hostname: "127.0.0.1", maxRequestBodySize: 300 * 1024 * 1024 }), scope)
  )
  const layer = appLayer(Layer.succeedContext(serverContext), { background: options.background ?? true, scorer: options.scorer }).pipe(
    Layer.provide(Logger.minimumLogLevel(level)),
    Layer.provide(options.logger === undefined ? Layer.empty : Logger.replace(Logger.defaultLogger, options.logger)),
    Layer.provide(options.tracer === undefined ? Layer.empty : Layer.setTracer(options.tracer)),
    Layer.provide(Layer.setConfigProvider(provider))
  )
  await Effect.runPromise(
    Layer.buildWithScope(layer, scope).pipe(Effect.withConfigProvider(provider), Logger.withMinimumLogLevel(level))
  )
  const address = Context.get(serverContext, HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") throw new Error("expected a TCP address")
  const url = `http://127.0.0.1:${address.port}`
  const db = testPool(databaseUrl, 4)

  const send = async <T>(path: string, options: RequestOptions & { readonly bearer?: string } = {}): Promise<Response<T>> => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.bearer !== undefined) headers["authorization"] = `Bearer ${options.bearer}`
    let body: BodyInit | undefined = options.rawBody
    if (options.body !== undefined) {
      body = JSON.stringify(options.body)
      headers["content-type"] ??= "application/json"
    }
    const response = await fetch(url + path, { method: options.method ?? "GET", headers, body })
    const text = await response.text()
    let parsed: unknown = text
    try {
      parsed = text === "" ? null : JSON.parse(text)
    } catch {
      // not JSON: keep the text
    }
    return { status: response.status, headers: response.headers, body: parsed as T }
  }

  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }

  const server: TestServer = {
    url,
    databaseUrl,
    adminToken,
    dataDir,
    db,
    request: (path, options = {}) => send(path, { ...options, bearer: options.key }),
    admin: (path, options = {}) => send(path, { ...options, bearer: adminToken }),
    account: async (options = {}) => {
      const { scopes, ...accountFields } = options
      const created = await send<{ id: string }>("/admin/accounts", {
        method: "POST",
        bearer: adminToken,
        body: { plan: "pro", ...accountFields }
      })
      if (created.status !== 200) throw new Error(`account: ${created.status} ${JSON.stringify(created.body)}`)
      const key = await send<{ id: string; api_key: string }>(`/admin/accounts/${created.body.id}/keys`, {
        method: "POST",
        bearer: adminToken,
        body: scopes === undefined ? {} : { scopes }
      })
      if (key.status !== 200) throw new Error(`key: ${key.status} ${JSON.stringify(key.body)}`)
      return { accountId: created.body.id, key: key.body.api_key, keyId: key.body.id }
    },
    stop,
    close: async () => {
      await stop()
      await db.end()
      if (options.databaseUrl === undefined) await dropDatabase(databaseUrl)
    }
  }
  return server
}

/** Sums of the journal per bucket, next to the wallet's balances, for one account. */
export const ledgerState = async (db: Pg.Pool, accountId: string) => {
  const { rows } = await db.query<{
    monthly_balance: string
    topup_balance: string
    journal_monthly: string
    journal_topup: string
    pending_holds: string
  }>(
    `SELECT w.monthly_balance, w.topup_balance,
            COALESCE((SELECT sum(amount) FROM credit_journal WHERE account_id = $1 AND bucket = 'monthly'), 0) AS journal_monthly,
            COALESCE((SELECT sum(amount) FROM credit_journal WHERE account_id = $1 AND bucket = 'topup'), 0) AS journal_topup,
            (SELECT count(*) FROM holds WHERE account_id = $1 AND status = 'pending') AS pending_holds
       FROM wallets w WHERE w.account_id = $1`,
    [accountId]
  )
  const row = rows[0]
  return {
    monthly: Number(row.monthly_balance),
    topup: Number(row.topup_balance),
    journalMonthly: Number(row.journal_monthly),
    journalTopup: Number(row.journal_topup),
    pendingHolds: Number(row.pending_holds)
  }
}
