/**
 * The database: one @effect/sql-pg client (its own wire-protocol driver and pool), on
 * DATABASE_URL when set, else on the embedded PGlite served over a unix socket (EmbeddedDb.ts).
 * Migrations run when the layer is built, so the app only starts on a migrated schema.
 *
 * What the driver does that Hookline relies on:
 * - A statement whose fiber is interrupted (a deadline passed, the client hung up) is cancelled on
 *   the server about 10 ms later, and its caller resumes only once the statement has stopped: a
 *   plain `Effect.timeout…` on a statement is a deadline the server honours. A connection whose
 *   statement ended before the cancel landed is retired, never reused under a late cancel.
 * - Statements are prepared once per connection, keyed by text and parameter types
 *   (DB_PREPARED_STATEMENTS=false turns that off, for a pooler that cannot carry them).
 * - Statements go through the extended protocol only: one statement per call, no `;` lists.
 */
import { PgClient, PgTypes } from "@effect/sql-pg"
import { Context, Duration, Effect, Fiber, Layer, Option, type Queue, type Redacted, Result, Schema, Stream } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { Migrator, SqlClient, SqlError } from "effect/sql"
import { readdirSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { ServerConfig } from "./Config.js"
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

/** Connections the embedded database serves: PGlite runs one statement at a time whatever the number. */
const embeddedConnections = 4

/** The pool's idle timeout: 0 keeps idle connections for good (the pool's sweep would spin on a zero delay). */
const idleTimeoutOf = (idle: Duration.Duration): Duration.Duration => Duration.isZero(idle) ? Duration.infinity : idle

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
    const client = yield* PgClient.make({
      ...networkOptions(url, config, types),
      maxConnections: config.pgMaxConnections,
      idleTimeout: idleTimeoutOf(config.pgIdleTimeout),
      // A startup parameter: every session starts with it, no extra round trip.
      startupParameters: { statement_timeout: String(Math.round(Duration.toMillis(config.dbStatementTimeout))) }
    })
    const listeners = yield* PgClient.make({ ...networkOptions(url, config, types), maxConnections: maxListeners, idleTimeout: Duration.infinity })
    return { client, listeners }
  })

/** On the embedded PGlite (no statement timeout: nothing else shares it). */
const embeddedClient = (config: ServerConfig) =>
  Effect.gen(function*() {
    const path = yield* embeddedDatabase(config.dataDir, embeddedConnections + 2).pipe(
      Effect.catchTag("DataDirLocked", (locked) =>
        Effect.fail(new SqlError.SqlError({ reason: new SqlError.ConnectionError({ cause: locked, message: locked.message, operation: "connect" }) })))
    )
    const client = yield* PgClient.make({
      path,
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
    // Not for LISTEN (notifications do not cross the socket): background work polls.
    return { client, listeners: client }
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
 * Lifts DB_STATEMENT_TIMEOUT for the rest of the current transaction: for work that is long by
 * nature and not a tenant's to trigger (the admin import).
 */
export const withoutStatementTimeout = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SET LOCAL statement_timeout = 0`)

/** SqlClient + PgClient + Listeners + DatabaseMode, on a migrated schema. */
export const SqlLive = Layer.unwrap(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const settings = Layer.succeed(DatabaseMode, { embedded: Option.isNone(config.databaseUrl), dataDir: config.dataDir })
    const clients = Layer.effectContext(Effect.map(
      Option.match(config.databaseUrl, {
        onNone: () => embeddedClient(config),
        onSome: (url) => networkClients(url, config)
      }),
      ({ client, listeners }) => Context.make(PgClient.PgClient, client).pipe(Context.add(SqlClient.SqlClient, client), Context.add(Listeners, listeners))
    )).pipe(Layer.provide(Reactivity.layer))
    return Layer.merge(clients, settings)
  })
)

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

/**
 * LISTEN on `channel` over a connection of its own (held until the stream ends; from Listeners
 * when provided, else from the client's pool), as a stream of notification payloads; the stream
 * fails when that connection is lost (callers retry). The connection is taken and registered
 * within the stream's scope, so a subscriber interrupted while it is still opening gives it back
 * too. Not in embedded mode: notifications do not cross PGlite's socket.
 */
export const listen = (channel: string): Stream.Stream<string, SqlError.SqlError, PgClient.PgClient> =>
  Stream.unwrap(Effect.gen(function*() {
    const own = yield* Effect.serviceOption(Listeners)
    const client = Option.isSome(own) ? own.value : yield* PgClient.PgClient
    const notifications: Queue.Dequeue<{ readonly payload: string }, SqlError.SqlError> = yield* client.listen(channel)
    return Stream.map(Stream.fromQueue(notifications), (notification) => notification.payload)
  }))
