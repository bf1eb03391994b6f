/**
 * Server-wide configuration, read from the environment through Effect Config with the
 * contract's values as defaults. Each area keeps its own settings beside its code
 * (Ledger/Config.ts, Predictions/Config.ts, ...); this file holds what the whole server shares.
 */
import { Config, Context, Duration, Effect, Layer, Option, Redacted, Schema, SchemaIssue } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"


/** A setting that is present but unreadable: the boot fails with this message. */
export const invalidSetting = (message: string) =>
  Effect.fail(new Config.ConfigError(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message }))))

/** A whole-number setting of at least 1, `fallback` when unset. */
export const countSetting = (name: string, fallback: number) =>
  Config.Int(name).pipe(
    Config.withDefault(fallback),
    Config.mapEffect((n) => (n >= 1 ? Effect.succeed(n) : invalidSetting(`${name} must be at least 1`)))
  )

/**
 * Catalog page queries (search, list, similar hooks) one process runs in the database at once;
 * the others wait their turn in arrival order, within SEARCH_TIMEOUT. A slow query then delays
 * its own caller instead of slowing every query it shares the database's cores with; too few
 * turns leave cheap queries waiting on round trips (docs/configuration.md has the figures).
 * The pages' connections are carved out of PG_MAX_CONNECTIONS (`pageConnections`, below).
 */
export const searchConcurrencySetting = countSetting("SEARCH_CONCURRENCY", 6)

export const ServerConfig = Config.all({
  port: Config.Int("PORT").pipe(Config.withDefault(8080)),
  host: Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
  publicBaseUrl: Config.option(Config.String("PUBLIC_BASE_URL")),
  databaseUrl: Config.option(Config.Redacted("DATABASE_URL")),
  dataDir: Config.String("DATA_DIR").pipe(Config.withDefault("./.hookline"), Config.map((dir) => resolve(dir))),
  pgMaxConnections: Config.Int("PG_MAX_CONNECTIONS").pipe(Config.withDefault(10)),
  searchConcurrency: searchConcurrencySetting,
  /**
   * How long a pool connection may sit idle before it is closed (0: never). Reopening one costs a
   * PostgreSQL backend start (~25–30 ms of CPU on the 2-core machine), paid by the next burst's requests.
   */
  pgIdleTimeout: Config.Duration("PG_IDLE_TIMEOUT").pipe(Config.withDefault(Duration.minutes(5))),
  /**
   * Every statement on the server's connections is cancelled by PostgreSQL past this (0: never),
   * so no request can hold a connection longer; migrations and the admin import lift it.
   */
  dbStatementTimeout: Config.Duration("DB_STATEMENT_TIMEOUT").pipe(Config.withDefault(Duration.seconds(10))),
  /**
   * PostgreSQL ends a session of the server's that sits inside a transaction without sending a
   * statement this long (0: never): a transaction left open by a connection the server lost then
   * releases its locks (a wallet's, an Idempotency-Key's). The admin import lifts it.
   */
  dbIdleInTransactionTimeout: Config.Duration("DB_IDLE_IN_TRANSACTION_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30))),
  /** Hot statements kept prepared on each connection (off behind a pooler that cannot carry them). */
  dbPreparedStatements: Config.Boolean("DB_PREPARED_STATEMENTS").pipe(Config.withDefault(true)),
  /**
   * Statements of different requests share a pool connection, pipelined into one write (sql-pg's
   * multiplexing); transactions and deadline-bound pages keep a connection of their own.
   */
  dbPipeline: Config.Boolean("DB_PIPELINE").pipe(Config.withDefault(true)),
  /**
   * Statements one shared connection carries at once: a statement waiting for a lock holds up
   * at most this many less one behind it (the driver's own default, 32, unless set).
   */
  dbPipelineDepth: countSetting("DB_PIPELINE_DEPTH", 32),
  /** How long a request whose client hung up may still run before it is interrupted (src/System/Server.ts). */
  dbCancelGrace: Config.Duration("DB_CANCEL_GRACE").pipe(Config.withDefault(Duration.millis(100))),
  /** At shutdown, how long the server waits for the answers of drained requests to be written before closing their connections. */
  shutdownFlushTimeout: Config.Duration("SHUTDOWN_FLUSH_TIMEOUT").pipe(Config.withDefault(Duration.seconds(5))),
  maxJsonBodyBytes: Config.Int("MAX_JSON_BODY_BYTES").pipe(Config.withDefault(64 * 1024)),
  seedDemo: Config.Boolean("SEED_DEMO").pipe(Config.withDefault(true)),
  demoCatalogSize: Config.Int("DEMO_CATALOG_SIZE").pipe(Config.withDefault(2_000))
})
export type ServerConfig = Config.Success<typeof ServerConfig>

/** The pools' idle timeout: PG_IDLE_TIMEOUT 0 keeps idle connections for good (the pool's sweep would spin on a zero delay). */
export const poolIdleTimeout = (config: ServerConfig): Duration.Duration =>
  Duration.isZero(config.pgIdleTimeout) ? Duration.infinity : config.pgIdleTimeout

/** Startup parameters: every session starts with them, no extra round trip. */
export const sessionTimeouts = (config: ServerConfig) => ({
  statement_timeout: String(Math.round(Duration.toMillis(config.dbStatementTimeout))),
  idle_in_transaction_session_timeout: String(Math.round(Duration.toMillis(config.dbIdleInTransactionTimeout)))
})

/**
 * The connections of PG_MAX_CONNECTIONS that catalog pages get for themselves: SEARCH_CONCURRENCY,
 * leaving at least one to the shared pool (none when PG_MAX_CONNECTIONS is 1: pages then pin the
 * shared pool's connections).
 */
export const pageConnections = (config: ServerConfig): number =>
  Math.max(0, Math.min(config.searchConcurrency, config.pgMaxConnections - 1))

/**
 * Several server processes from one command (src/System/Supervisor.ts). WEB_CONCURRENCY is the
 * number of processes; above 1, `bun src/main.ts` supervises that many children on one port.
 */
export const ProcessesConfig = Config.all({
  processes: countSetting("WEB_CONCURRENCY", 1),
  /** The wait before a child that died is replaced; doubled at each death in a row, up to the max. */
  restartDelay: Config.Duration("WEB_RESTART_DELAY").pipe(Config.withDefault(Duration.seconds(1))),
  /** The longest wait before a replacement; a child that lived this long resets the wait. */
  restartMaxDelay: Config.Duration("WEB_RESTART_MAX_DELAY").pipe(Config.withDefault(Duration.seconds(30))),
  /** Set by the supervisor on each child (0 … N-1): the child listens with SO_REUSEPORT. Not an operator setting. */
  processIndex: Config.option(Config.Int("HOOKLINE_PROCESS_INDEX"))
})
export type ProcessesConfig = Config.Success<typeof ProcessesConfig>

/** The address clients reach this server on (upload links are built from it). */
export const publicBaseUrl = (config: ServerConfig): string =>
  Option.getOrElse(config.publicBaseUrl, () => `http://localhost:${config.port}`).replace(/\/+$/, "")

/** `host:port/database` of a PostgreSQL URL, without user or password. */
export const databaseLabel = (databaseUrl: string): string => {
  if (!URL.canParse(databaseUrl)) return "PostgreSQL (DATABASE_URL)"
  const url = new URL(databaseUrl)
  return `PostgreSQL at ${url.hostname}${url.port === "" ? "" : `:${url.port}`}${url.pathname}`
}

/**
 * Server secrets. Taken from the environment when set; otherwise generated once and kept in
 * DATA_DIR/secrets.json (mode 0600) so restarts and several processes on one host agree.
 * Production deployments set them explicitly (see README, "Configuration").
 */
export interface ServerSecrets {
  /** null: the admin API answers 404 (a real database and no ADMIN_TOKEN). */
  readonly adminToken: Redacted.Redacted<string> | null
  readonly cursorSecret: Redacted.Redacted<string>
  readonly webhookSecretKey: Redacted.Redacted<string>
  /** True when the admin token was generated here (embedded mode prints it). */
  readonly adminTokenGenerated: boolean
}

interface StoredSecrets {
  admin_token?: string
  cursor_secret?: string
  webhook_secret_key?: string
}

const randomSecret = (bytes: number) => randomBytes(bytes).toString("base64url")

const readStored = (file: string): StoredSecrets | undefined =>
  existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as StoredSecrets) : undefined

/**
 * Writes the secrets file whole through a temp file, so no process ever reads half a file.
 * `create`: only if no file exists yet (link fails when another process made one first: its
 * secrets win); otherwise the file is replaced (rename).
 */
const writeStored = (file: string, secrets: StoredSecrets, mode: "create" | "replace") => {
  const temp = `${file}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`
  writeFileSync(temp, JSON.stringify(secrets, null, 2), { mode: 0o600 })
  try {
    if (mode === "create") linkSync(temp, file)
    else renameSync(temp, file)
  } catch (error) {
    if (!(error instanceof Error && "code" in error && error.code === "EEXIST")) throw error
  } finally {
    rmSync(temp, { force: true })
  }
}

/**
 * The stored secrets, with `needed` ones generated if missing. Several processes starting
 * together on a fresh DATA_DIR race to create the file: exactly one creation wins, and every
 * process then reads the file, so all of them use the same secrets. (Adding a key to an existing
 * file only happens when an embedded server, a single process, first needs its admin token.)
 */
const storedSecrets = (dataDir: string, needed: ReadonlyArray<keyof StoredSecrets>): StoredSecrets => {
  const file = join(dataDir, "secrets.json")
  const stored = readStored(file)
  if (needed.length === 0) return stored ?? {}
  const missing = needed.filter((key) => stored?.[key] === undefined)
  if (missing.length === 0 && stored !== undefined) return stored
  mkdirSync(dataDir, { recursive: true })
  const next: StoredSecrets = { ...stored }
  for (const key of missing) next[key] = randomSecret(32)
  writeStored(file, next, stored === undefined ? "create" : "replace")
  return readStored(file) ?? next
}

export const loadServerSecrets = Effect.gen(function*() {
  const config = yield* ServerConfig
  const fromEnv = yield* Config.all({
    adminToken: Config.option(Config.Redacted("ADMIN_TOKEN")),
    cursorSecret: Config.option(Config.Redacted("CURSOR_SECRET")),
    webhookSecretKey: Config.option(Config.Redacted("WEBHOOK_SECRET_KEY"))
  })
  const given = (value: Option.Option<Redacted.Redacted<string>>) => Option.filter(value, (secret) => Redacted.value(secret) !== "")
  const embedded = Option.isNone(config.databaseUrl)
  // With a real database the admin token is never generated: without ADMIN_TOKEN there is no admin API.
  const needed: Array<keyof StoredSecrets> = [
    ...(embedded && Option.isNone(given(fromEnv.adminToken)) ? ["admin_token" as const] : []),
    ...(Option.isNone(given(fromEnv.cursorSecret)) ? ["cursor_secret" as const] : []),
    ...(Option.isNone(given(fromEnv.webhookSecretKey)) ? ["webhook_secret_key" as const] : [])
  ]
  const stored = storedSecrets(config.dataDir, needed)
  const pick = (value: Option.Option<Redacted.Redacted<string>>, key: keyof StoredSecrets) =>
    Option.getOrElse(given(value), () => Redacted.make(stored[key] ?? ""))
  // A token stored by an embedded run is that run's: with a real database only ADMIN_TOKEN opens the admin API.
  const adminToken = Option.isSome(given(fromEnv.adminToken)) || (embedded && stored.admin_token !== undefined)
    ? pick(fromEnv.adminToken, "admin_token")
    : null
  return {
    adminToken,
    cursorSecret: pick(fromEnv.cursorSecret, "cursor_secret"),
    webhookSecretKey: pick(fromEnv.webhookSecretKey, "webhook_secret_key"),
    adminTokenGenerated: Option.isNone(given(fromEnv.adminToken)) && adminToken !== null
  } satisfies ServerSecrets
})

export class Secrets extends Context.Service<Secrets, ServerSecrets>()("hookline/Secrets") {
  static readonly layer = Layer.effect(Secrets, loadServerSecrets)
}
