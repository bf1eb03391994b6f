/**
 * The database: one @effect/sql-pg client (its own wire-protocol driver and pool), on
 * DATABASE_URL when set, else on the embedded PGlite served over a unix socket (EmbeddedDb.ts).
 * Migrations run when the layer is built, so the app only starts on a migrated schema.
 *
 * What the driver does that Hookline relies on:
 * - On DATABASE_URL, statements of different requests share the pool's connections, pipelined
 *   into one write each tick, DB_PIPELINE_DEPTH at most on one (DB_PIPELINE=false: one each). One
 *   such statement cannot be cancelled: an interrupted one runs on (within DB_STATEMENT_TIMEOUT).
 * - On a connection of its own (a transaction, or `onOwnConnection`), a statement whose fiber is
 *   interrupted is cancelled on the server about 10 ms later, and its caller resumes only once it
 *   has stopped: a deadline around it is one the server honours. A connection whose statement
 *   ended before the cancel landed is retired, never reused under a late cancel.
 * - Statements are prepared once per connection, keyed by text and parameter types
 *   (DB_PREPARED_STATEMENTS=false turns that off, for a pooler that cannot carry them).
 * - Statements go through the extended protocol only: one statement per call, no `;` lists.
 */
import { PgClient, PgTypes } from "@effect/sql-pg"
import { Cause, Config, Context, Duration, Effect, Layer, Option, type Queue, type Redacted, Result, Schema, Stream } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { Migrator, SqlClient, SqlError } from "effect/sql"
import { readdirSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { pageConnections, poolIdleTimeout, ServerConfig, sessionTimeouts } from "./Config.js"
import { embeddedDatabase } from "./EmbeddedDb.js"

/** How the database is reached; background work polls instead of LISTEN in embedded mode. */
export class DatabaseMode extends Context.Service<DatabaseMode, {
  readonly embedded: boolean
  readonly dataDir: string
}>()("hookline/DatabaseMode") {}

/**
 * int8 and numeric as JS numbers (the driver's own codecs give bigint and string): Hookline's
 * amounts and counts fit in a double. Arrays of them follow, through the registry's lookup.
 */
const numberTypes = (): PgTypes.Registry => {
  const registry = PgTypes.makeRegistry()
  const asNumber = (oid: number): PgTypes.Codec<number | bigint | string> => ({
    encode: (value) => PgTypes.encode(typeof value !== "number" ? value : oid === PgTypes.OID.numeric ? String(value) : Number.isInteger(value) ? BigInt(value) : value, oid),
    decode: (bytes) => Result.map(PgTypes.decode(bytes, oid, 1), Number)
  })
  registry.register(PgTypes.OID.int8, asNumber(PgTypes.OID.int8))
  registry.register(PgTypes.OID.numeric, asNumber(PgTypes.OID.numeric))
  return registry
}

/**
 * A FROM item that turns synchronous_commit off for the rest of the transaction: a statement run
 * on its own that joins it commits without waiting for the disk. For writes whose loss in a
 * database crash is harmless because a later synchronous commit, made before anyone is answered,
 * flushes the log past them (the idempotency claim, a metered request's hold).
 */
export const commitWithoutFlush = "(SELECT set_config('synchronous_commit', 'off', true)) AS this_statement_only"

/** Client connections to the embedded database: they take turns on its one session. */
const embeddedConnections = 4

/** The client options shared by the server's pool and the migration connection. */
const networkOptions = (url: Redacted.Redacted, config: ServerConfig, types: PgTypes.Registry): PgClient.PgPoolConfig => ({
  url,
  applicationName: "hookline",
  types,
  prepare: config.dbPreparedStatements
})

/**
 * The connections LISTEN holds, apart from the server's pool (PG_MAX_CONNECTIONS stays the
 * requests'): opened when a listener starts, one per listening stream.
 */
export class Listeners extends Context.Service<Listeners, PgClient.PgClient>()("hookline/Listeners") {}

/**
 * Catalog pages' connections, carved out of PG_MAX_CONNECTIONS (`pageConnections`; docs/configuration.md): one statement
 * each, so a deadline cancels it, and no shared pipeline to drain first. Embedded: the shared client.
 */
export class PageClient extends Context.Service<PageClient, SqlClient.SqlClient>()("hookline/PageClient") {}

/** Listening streams the server runs at most at once (the webhook dispatcher and the prediction workers). */
const maxListeners = 8

/** On DATABASE_URL: migrated first on a connection of its own, then the server's pool and its listeners. */
const networkClients = (url: Redacted.Redacted, config: ServerConfig) =>
  Effect.gen(function*() {
    const types = numberTypes()
    yield* Effect.scoped(Effect.flatMap(
      // No DB_STATEMENT_TIMEOUT here: an index build on a large catalog takes minutes, and a
      // second process waits on the first one's migration lock.
      PgClient.make({ ...networkOptions(url, config, types), maxConnections: 1, startupParameters: { statement_timeout: "0" } }),
      migrate
    ))
    const pooled = { ...networkOptions(url, config, types), idleTimeout: poolIdleTimeout(config), startupParameters: sessionTimeouts(config) }
    const pageCount = pageConnections(config)
    const client = yield* PgClient.make({
      ...pooled,
      maxConnections: config.pgMaxConnections - pageCount,
      multiplex: config.dbPipeline,
      multiplexConcurrency: config.dbPipelineDepth
    })
    const pages: SqlClient.SqlClient = pageCount === 0 ? client : yield* PgClient.make({ ...pooled, maxConnections: pageCount })
    const listeners = yield* PgClient.make({ ...networkOptions(url, config, types), maxConnections: maxListeners, idleTimeout: Duration.infinity })
    return { client, pages, listeners }
  })

/**
 * On the embedded PGlite: the pool's connections are in-process (EmbeddedSession.ts), several of
 * them so that a connection held by a transaction never blocks another fiber from asking; the
 * session still runs one turn at a time. DB_STATEMENT_TIMEOUT cannot stop a PGlite statement; it
 * bounds how long a connection may hold the session without sending anything.
 */
const embeddedClient = (config: ServerConfig) =>
  Effect.gen(function*() {
    const runFork = Effect.runForkWith(yield* Effect.context<never>())
    const session = yield* embeddedDatabase(config.dataDir, {
      idleLimitMs: Duration.toMillis(config.dbStatementTimeout),
      onFailure: (reason, cause) => {
        runFork(Effect.logError(reason, cause === undefined ? Cause.empty : Cause.die(cause)))
      }
    }).pipe(
      Effect.catchTag("DataDirLocked", (locked) =>
        Effect.fail(new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: locked, message: locked.message, operation: "connect" }) })))
    )
    const client = yield* PgClient.make({
      stream: session.connect,
      database: "postgres",
      username: "postgres",
      ssl: false,
      applicationName: "hookline",
      types: numberTypes(),
      prepare: config.dbPreparedStatements,
      maxConnections: embeddedConnections,
      idleTimeout: Duration.infinity
    })
    yield* migrate(client)
    // Not for LISTEN (notifications do not reach another connection): background work polls.
    return { client, pages: client, listeners: client }
  })

export const migrationsDirectory = fileURLToPath(new URL("../migrations", import.meta.url))

/** migrations/NNNN_name.ts, each a default-exported Effect, imported when the migrator needs it. */
const migrationFiles = Migrator.fromGlob(Object.fromEntries(
  readdirSync(migrationsDirectory).map((file) => [file, () => import(join(migrationsDirectory, file))])
))

/** Applies the migrations not yet recorded (in one transaction, under the migrator's table lock). */
const migrate = (client: PgClient.PgClient) =>
  Migrator.make({})({ loader: migrationFiles }).pipe(Effect.provideService(SqlClient.SqlClient, client))

/**
 * Lifts DB_STATEMENT_TIMEOUT and DB_IDLE_IN_TRANSACTION_TIMEOUT for the rest of the current
 * transaction: for work that is long by nature and not a tenant's to trigger (the admin import,
 * whose transaction also waits for its upload's next bytes).
 */
export const withoutSessionTimeouts = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`SELECT set_config('statement_timeout', '0', true), set_config('idle_in_transaction_session_timeout', '0', true)`
)

/** The highest migration applied to the database (0 before any): /readyz compares it with the build's. */
export const appliedMigration = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => Effect.map(sql<{ latest: number | null }>`SELECT max(migration_id) AS latest FROM effect_sql_migrations`, (rows) => rows[0]?.latest ?? 0)
)

/** SqlClient + PgClient + PageClient + Listeners + DatabaseMode, on a migrated schema. */
export const SqlLive = Layer.unwrap(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const settings = Layer.succeed(DatabaseMode, { embedded: Option.isNone(config.databaseUrl), dataDir: config.dataDir })
    const clients = Layer.effectContext(Effect.map(
      Option.match(config.databaseUrl, {
        onNone: () => embeddedClient(config),
        onSome: (url) => networkClients(url, config)
      }),
      ({ client, listeners, pages }) => Context.make(PgClient.PgClient, client).pipe(Context.add(SqlClient.SqlClient, client), Context.add(Listeners, listeners), Context.add(PageClient, pages))
    )).pipe(Layer.provide(Reactivity.layer))
    return Layer.merge(clients, settings)
  })
)

/**
 * Runs `effect`'s statements on a pool connection of its own (or the transaction's, inside one),
 * so that interrupting it cancels its statement on the server: for statements under a deadline.
 */
export const onOwnConnection = <A, E, R>(sql: SqlClient.SqlClient, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.serviceOption(sql.transactionService), (transaction) =>
    Option.isSome(transaction) ? effect : Effect.scoped(
      Effect.flatMap(Effect.orDie(sql.reserve), (connection) => Effect.provideService(effect, sql.transactionService, [connection, 0]))
    ))

/**
 * Database and row-decoding failures are defects to the API: they never appear in a handler's
 * error type, become a logged 500, and roll back any transaction they happen in.
 */
export const orDieOnDb = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError.SqlError | Schema.SchemaError>, R> =>
  Effect.catch(effect, (error) =>
    SqlError.isSqlError(error) || Schema.isSchemaError(error)
      ? Effect.die(error)
      : Effect.fail(error as Exclude<E, SqlError.SqlError | Schema.SchemaError>))

/** SQLSTATEs of a server going away or not back yet: admin_shutdown, crash_shutdown, cannot_connect_now. */
const serverGoingAway = new Set(["57P01", "57P02", "57P03"])

/**
 * Whether `error` says the database cannot be reached or the connection was lost (refused,
 * closed, shutting down, starting up), rather than that the statement itself failed. A request
 * failing so is answered 503 with Retry-After; the database is usually back within seconds.
 */
export const isDatabaseUnavailable = (error: unknown): boolean => {
  if (!SqlError.isSqlError(error)) return false
  if (error.reason._tag === "ConnectionError") return true
  const cause: unknown = error.reason.cause
  if (typeof cause !== "object" || cause === null || !("code" in cause) || typeof cause.code !== "string") return false
  return serverGoingAway.has(cause.code) || cause.code.startsWith("08")
}

/**
 * Whether a write that failed so may still have happened: the connection was lost after the
 * statement went out (not while connecting), so PostgreSQL may have committed it unseen.
 */
export const isOutcomeUnknown = (error: unknown): boolean =>
  SqlError.isSqlError(error) && error.reason._tag === "ConnectionError" && error.reason.operation !== "connect"

/** The database error in `cause` (a failure or a defect), if any. */
const sqlErrorIn = (cause: Cause.Cause<unknown>): unknown => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) return failure.value
  const defect = Cause.findDefect(cause)
  return defect._tag === "Success" ? defect.success : undefined
}

/**
 * Logs a failed pass of a background loop (a sweeper, a worker, the dispatcher), which runs again
 * at its next turn: while the database is away, one warning line without the stack (the loop says
 * so every turn until it is back); any other failure is an error with its cause.
 */
export const logBackgroundFailure = (what: string) => (cause: Cause.Cause<unknown>): Effect.Effect<void> => {
  const error = sqlErrorIn(cause)
  return isDatabaseUnavailable(error)
    ? Effect.logWarning(`${what}: the database cannot be reached; trying again at the next turn`).pipe(
      Effect.annotateLogs({ error: SqlError.isSqlError(error) ? error.message : "unknown" })
    )
    : Effect.logError(what, cause)
}

/** How long a lost LISTEN waits before it subscribes again. */
export const ListenRetryInterval = Config.Duration("LISTEN_RETRY_INTERVAL").pipe(Config.withDefault(Duration.seconds(1)))

/**
 * LISTEN on `channel` for as long as the caller's fiber lives: `wake` runs on every notification
 * and once each time the subscription is (re)confirmed, since work queued while nobody listened
 * sent its notification to no one. A lost connection is logged once per loss and the LISTEN taken
 * again every LISTEN_RETRY_INTERVAL until the database answers.
 */
export const listenForever = <R>(channel: string, wake: Effect.Effect<void, never, R>) =>
  Effect.gen(function*() {
    const retryInterval = yield* ListenRetryInterval
    let lost = false
    const subscribeAndServe = Effect.scoped(Effect.gen(function*() {
      const queue = yield* subscribe(channel)
      if (lost) {
        lost = false
        yield* Effect.logInfo("LISTEN restored")
      }
      yield* wake
      yield* Stream.runForEach(Stream.fromQueue(queue), () => wake)
    }))
    return yield* subscribeAndServe.pipe(
      Effect.catchCause((cause) => {
        if (lost) return Effect.void
        lost = true
        return Effect.logWarning("LISTEN lost; taking it again once the database answers", cause)
      }),
      Effect.andThen(Effect.sleep(retryInterval)),
      Effect.forever
    )
  }).pipe(Effect.annotateLogs({ channel }))

/** The notifications of `channel`, once PostgreSQL has confirmed the LISTEN (see `listen`). */
const subscribe = (channel: string) =>
  Effect.gen(function*() {
    const own = yield* Effect.serviceOption(Listeners)
    const client = Option.isSome(own) ? own.value : yield* PgClient.PgClient
    const notifications: Queue.Dequeue<{ readonly payload: string }, SqlError.SqlError> = yield* client.listen(channel)
    return notifications
  })

/**
 * LISTEN on `channel` over a connection of its own (held until the stream ends; from Listeners
 * when provided, else from the client's pool), as a stream of notification payloads; the stream
 * fails when that connection is lost (callers retry). The connection is taken and registered
 * within the stream's scope, so a subscriber interrupted while it is still opening gives it back
 * too. Not in embedded mode: notifications do not cross PGlite's socket.
 */
export const listen = (channel: string): Stream.Stream<string, SqlError.SqlError, PgClient.PgClient> =>
  Stream.unwrap(Effect.map(subscribe(channel), (notifications) => Stream.map(Stream.fromQueue(notifications), (notification) => notification.payload)))
