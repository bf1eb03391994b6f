/**
 * A real Hookline server for tests: a fresh database on the local Postgres (127.0.0.1:5432,
 * or TEST_DATABASE_URL), the whole application layer on a random port, real HTTP.
 */
import { ConfigProvider, Context, Effect, Exit, Layer, Logger, type LogLevel, References, Scope, Tracer } from "effect"
import { HttpServer } from "effect/http"
import { Statement } from "effect/sql"
import { randomBytes } from "node:crypto"
import { rmSync } from "node:fs"
import Pg from "pg"
import type { Account, ApiKeyCreated, ImportResult as ImportResultSchema } from "../../src/Admin/Api.js"
import { apiOnlyLayer, appLayer } from "../../src/App.js"
import type { HookLean, HookList, HookRich } from "../../src/Hooks/Api.js"
import { type NotFoundWire, RequestId } from "../../src/Errors.js"
import type { CreditTransaction, CreditTransactionList, UsageSummary, Wallet, WalletAlert } from "../../src/Ledger/Api.js"
import { withRequestId } from "../../src/Logging.js"
import type { Prediction, PredictUpload } from "../../src/Predictions/Api.js"
import { ClipScorer } from "../../src/Predictions/Scorer.js"
import * as Server from "../../src/System/Server.js"
import type { EventType, Webhook, WebhookDelivery, WebhookDeliveryList, WebhookSecret, WebhookTest } from "../../src/Webhooks/Api.js"
import { tempDir } from "./tempDirs.js"

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

/** The error envelope every non-2xx answer carries (each error's wire schema encodes to it). */
export type ErrorBody = typeof NotFoundWire.Encoded

// The wire shapes the tests read: the contract's own schemas, as encoded (JSON).

/** A hook as listed by search and list. */
export type HookLeanBody = typeof HookLean.Encoded
/** A page of hooks from search or list. */
export type HookPage = typeof HookList.Encoded
/** The answer to POST /v1/predict/upload: a prediction awaiting its clip and where to PUT it. */
export type UploadLink = typeof PredictUpload.Encoded
/** A prediction (GET /v1/predict/{id}, POST /v1/predict, webhook event data). */
export type PredictionBody = typeof Prediction.Encoded
/** A wallet (GET /v1/wallet, an admin grant's answer). */
export type WalletBody = typeof Wallet.Encoded
/** An account (the admin account routes). */
export type AccountBody = typeof Account.Encoded
/** A new API key (POST /admin/accounts/{id}/keys): the plain key is in this answer only. */
export type ApiKeyBody = typeof ApiKeyCreated.Encoded
/** The answer to POST /admin/catalog/hooks. */
export type ImportResult = typeof ImportResultSchema.Encoded
/** A full hook (GET /v1/hooks/{id}). */
export type HookRichBody = typeof HookRich.Encoded
/** The webhook configuration (/v1/webhooks): GET, DELETE, and a PUT of a webhook that already exists. */
export type WebhookBody = typeof Webhook.Encoded
/** The webhook with a newly issued secret (the first PUT /v1/webhooks, POST /v1/webhooks/rotate): the secret is there. */
export type WebhookSecretBody = typeof WebhookSecret.Encoded & { readonly secret: string }
/** One row of the delivery log (/v1/webhooks/deliveries). */
export type WebhookDeliveryBody = typeof WebhookDelivery.Encoded
export type WebhookDeliveryPage = typeof WebhookDeliveryList.Encoded
/** The answer to POST /v1/webhooks/test. */
export type WebhookTestBody = typeof WebhookTest.Encoded
/** One change of a balance, as listed by the credit history. */
export type TransactionBody = typeof CreditTransaction.Encoded
/** A page of the credit history (/v1/wallet/transactions, /admin/accounts/{id}/transactions). */
export type TransactionPage = typeof CreditTransactionList.Encoded

/** A webhook event: the signed body a receiver gets, and the payload the outbox stores (Signing.ts eventBody). */
export interface WebhookEvent<Type extends EventType = "prediction.succeeded" | "prediction.failed", Data = PredictionBody> {
  readonly id: string
  readonly object: "event"
  readonly type: Type
  readonly created_at: string
  readonly data: Data
}

/** A wallet event's data: the wallet, and the alert threshold it crossed. */
export type WalletEventData = WalletBody & { readonly low_balance_threshold: number | null }

/** The alert settings (/v1/wallet/alert). */
export type WalletAlertBody = typeof WalletAlert.Encoded
/** The usage summary (/v1/wallet/usage). */
export type UsageBody = typeof UsageSummary.Encoded

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

/** A LOG_LEVEL setting as Effect names it ("Warning" and "Warn" alike). */
const logLevelOf = (name: string): LogLevel.LogLevel => {
  const levels = ["All", "Fatal", "Error", "Warn", "Info", "Debug", "Trace", "None"] as const
  return levels.find((level) => name.toLowerCase().startsWith(level.toLowerCase())) ?? "Warn"
}

/** A statement transformer that only listens: each statement runs unchanged. */
const statementListener = (
  listener: (statement: { readonly text: string; readonly requestId: string; readonly traced: boolean }) => void
) =>
  Layer.succeed(Statement.CurrentTransformer, (statement, _sql, fiber) => {
    listener({ text: statement.compile()[0], requestId: fiber.getRef(RequestId), traced: fiber.getRef(References.TracerEnabled) })
    return Effect.succeed(statement)
  })

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
    /** The clip scorer the workers use (the predictions tests control it); default ClipScorer.layer. */
    readonly scorer?: Layer.Layer<ClipScorer>
    /**
     * Hears every statement SqlClient runs: its text, the request id of the fiber running it
     * ("req_unknown" outside a request) and whether that fiber traces.
     */
    readonly onStatement?: (statement: { readonly text: string; readonly requestId: string; readonly traced: boolean }) => void
  } = {}
): Promise<TestServer> => {
  const databaseUrl = options.databaseUrl ?? (await createDatabase())
  // A data directory of its own unless one is given (another server's), removed when this one stops.
  const ownDataDir = env.DATA_DIR === undefined ? tempDir("hookline-test-") : null
  const dataDir = env.DATA_DIR ?? ownDataDir!
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
  const inherited: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined) inherited[name] = value
  const provider = ConfigProvider.fromEnv({ env: { ...inherited, ...Object.fromEntries(settings) } })
  const level = logLevelOf(settings.get("LOG_LEVEL") ?? "Warning")
  const scope = Effect.runSync(Scope.make())
  const application = options.background ?? true
    ? appLayer(Server.layerLoopback()).pipe(Layer.provide(options.scorer ?? ClipScorer.layer))
    : apiOnlyLayer(Server.layerLoopback())
  const layer = application.pipe(
    Layer.provide(Layer.succeed(References.MinimumLogLevel, level)),
    // Request ids added as LoggingLive adds them (no redaction: a test's lines must be clean by construction).
    Layer.provide(options.logger === undefined ? Layer.empty : Logger.layer([withRequestId(options.logger)])),
    Layer.provide(options.tracer === undefined ? Layer.empty : Layer.succeed(Tracer.Tracer, options.tracer)),
    Layer.provide(options.onStatement === undefined ? Layer.empty : statementListener(options.onStatement)),
    Layer.provide(ConfigProvider.layer(provider))
  )
  const app = await Effect.runPromise(
    Layer.buildWithScope(layer, scope).pipe(
      Effect.provideService(ConfigProvider.ConfigProvider, provider),
      Effect.provideService(References.MinimumLogLevel, level)
    )
  )
  const address = Context.get(app, HttpServer.HttpServer).address
  if (address._tag === "UnixPathAddress") throw new Error("expected a TCP address")
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
    if (ownDataDir !== null) rmSync(ownDataDir, { recursive: true, force: true })
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
      const created = await send<AccountBody>("/admin/accounts", {
        method: "POST",
        bearer: adminToken,
        body: { plan: "pro", ...accountFields }
      })
      if (created.status !== 200) throw new Error(`account: ${created.status} ${JSON.stringify(created.body)}`)
      const key = await send<ApiKeyBody>(`/admin/accounts/${created.body.id}/keys`, {
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

/** Something that runs a query: a pool, or a client of the test's own. */
type Queryable = Pick<Pg.Pool, "query">

/** Statements of other sessions on `db`'s database running now (not idle or waiting idle in a transaction) whose text is LIKE `pattern`. */
export const statementsRunning = async (db: Queryable, pattern: string) =>
  (await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()`,
    [pattern]
  )).rows[0].n

/** The server's statements on `db`'s database waiting for a lock now. */
export const statementsWaitingOnLocks = async (db: Queryable) =>
  (await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND application_name = 'hookline' AND state = 'active' AND wait_event_type = 'Lock'`
  )).rows[0].n

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
