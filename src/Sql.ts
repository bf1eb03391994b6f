/**
 * The database: one @effect/sql-pg client, on DATABASE_URL when set, else on the embedded
 * PGlite. Migrations run when the layer is built, so the app only starts on a migrated schema.
 */
import { BunContext } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Context, Duration, Effect, Layer, Option, ParseResult, Redacted, Stream } from "effect"
import { fileURLToPath } from "node:url"
import Pg from "pg"
import { defaultCancelGrace, ServerConfig } from "./Config.js"
import { embeddedPool } from "./EmbeddedDb.js"

/** How the database is reached; background work polls instead of LISTEN in embedded mode. */
export class DatabaseMode extends Context.Tag("hookline/DatabaseMode")<DatabaseMode, {
  readonly embedded: boolean
  readonly dataDir: string
}>() {}

// int8 and numeric come back from pg as strings; Hookline's amounts fit in a double.
const INT8_OID = 20
const NUMERIC_OID = 1700
const types: Pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === INT8_OID || oid === NUMERIC_OID
      ? (value: string) => Number(value)
      : Pg.types.getTypeParser(oid, format ?? "text")) as Pg.CustomTypesConfig["getTypeParser"]
}

/** The pg pool under the client, for its usage metrics (total, idle and waiting connections). */
export class DbPool extends Context.Tag("hookline/DbPool")<DbPool, Pg.Pool>() {}

/**
 * Whether StatementRunner keeps the statements marked `prepared` prepared on each connection
 * (DB_PREPARED_STATEMENTS): on, unless a pooler in transaction mode cannot carry them.
 */
export class PreparedStatements extends Context.Reference<PreparedStatements>()("hookline/PreparedStatements", {
  defaultValue: () => true
}) {}

/**
 * How long a statement whose request was abandoned (the client hung up) may still run before it is
 * cancelled on the server (DB_CANCEL_GRACE). A cancel costs PostgreSQL a backend for the cancel and
 * another to replace the connection, which is more than a short statement costs to finish.
 */
export class CancelGrace extends Context.Reference<CancelGrace>()("hookline/CancelGrace", {
  defaultValue: (): Duration.Duration => defaultCancelGrace
}) {}

/**
 * A FROM item that turns synchronous_commit off for the rest of the transaction: a statement run
 * on its own that joins it commits without waiting for the disk. For writes whose loss in a
 * database crash is harmless because a later synchronous commit, made before anyone is answered,
 * flushes the log past them (the idempotency claim, a metered request's hold).
 */
export const commitWithoutFlush = "(SELECT set_config('synchronous_commit', 'off', true)) AS this_statement_only"

/** The longest delay a JavaScript timer holds; a longer one fires at once. */
const longestTimer = Duration.millis(2 ** 31 - 1)

/** A pool on DATABASE_URL, checked with one query at start (as PgClient.layer does). */
const networkPool = (url: Redacted.Redacted, max: number, statementTimeout: Duration.Duration, idleTimeout: Duration.Duration) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const pool = new Pg.Pool({
        connectionString: Redacted.value(url),
        max,
        types,
        application_name: "hookline",
        // 0 keeps idle connections; so does a duration past what a timer can hold (~24.8 days).
        idleTimeoutMillis: Duration.lessThanOrEqualTo(idleTimeout, longestTimer) ? Math.round(Duration.toMillis(idleTimeout)) : 0,
        // Sent as a startup parameter: every session starts with it, no extra round trip.
        statement_timeout: Math.round(Duration.toMillis(statementTimeout))
      })
      // An idle connection's error (server restart): the pool drops it and reconnects on demand.
      pool.on("error", () => {})
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.timeoutOption(1000))
  ).pipe(
    Effect.tap((pool) =>
      Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(
        Effect.timeoutFail({
          duration: Duration.seconds(5),
          onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
        })
      )
    )
  )

const ClientLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const mode = Layer.succeed(DatabaseMode, {
      embedded: Option.isNone(config.databaseUrl),
      dataDir: config.dataDir
    })
    const pool = Layer.scoped(
      DbPool,
      Option.match(config.databaseUrl, {
        onNone: () =>
          embeddedPool(config.dataDir, types).pipe(
            Effect.catchTag("DataDirLocked", (locked) => new SqlError({ cause: locked, message: locked.message }))
          ),
        onSome: (url) => networkPool(url, config.pgMaxConnections, config.dbStatementTimeout, config.pgIdleTimeout)
      })
    )
    const client = Layer.unwrapEffect(
      Effect.map(DbPool, (built) => PgClient.layerFromPool({ acquire: Effect.succeed(built), types }))
    )
    return Layer.mergeAll(client.pipe(Layer.provideMerge(pool)), mode, Layer.succeed(PreparedStatements, config.dbPreparedStatements), Layer.succeed(CancelGrace, config.dbCancelGrace))
  })
)

export const migrationsDirectory = fileURLToPath(new URL("../migrations", import.meta.url))

/**
 * Lifts DB_STATEMENT_TIMEOUT for the rest of the current transaction: for work that is long by
 * nature and not a tenant's to trigger (the admin import).
 */
export const withoutStatementTimeout = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SET LOCAL statement_timeout = 0`)

const migrate = PgMigrator.run({ loader: PgMigrator.fromFileSystem(migrationsDirectory) })

/**
 * Migrations run on a connection of their own without DB_STATEMENT_TIMEOUT (an index build on a
 * large catalog takes minutes, and a second process waits on the first one's migration lock),
 * closed once they are done. The embedded database has one connection and no timeout.
 */
const MigratorLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* ServerConfig
    yield* Option.match(config.databaseUrl, {
      onNone: () => migrate,
      onSome: (url) =>
        migrate.pipe(
          Effect.provide(PgClient.layerFromPool({ acquire: networkPool(url, 1, Duration.zero, Duration.zero), types })),
          Effect.scoped
        )
    })
  })
).pipe(Layer.provide(BunContext.layer))

/** SqlClient + PgClient + DbPool + DatabaseMode, on a migrated schema. */
export const SqlLive = MigratorLive.pipe(Layer.provideMerge(ClientLive))

/**
 * Database and row-decoding failures are defects to the API: they never appear in a handler's
 * error type, become a logged 500, and roll back any transaction they happen in.
 */
export const orDieOnDb = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError | ParseResult.ParseError>, R> =>
  Effect.catchAll(effect, (error) =>
    error instanceof SqlError || ParseResult.isParseError(error)
      ? Effect.die(error)
      : Effect.fail(error as Exclude<E, SqlError | ParseResult.ParseError>))

/**
 * LISTEN on `channel` over a connection of its own, as a stream of notification payloads; the
 * stream fails when that connection is lost (callers retry). Used instead of PgClient.listen,
 * whose shared listen connection (an RcRef) leaks when its subscriber is interrupted while the
 * connection is still opening: Effect 3.22's RcRef never closes the scope of an interrupted
 * acquisition, so a server stopped just after it started kept one connection open for good.
 * Here acquireRelease opens the connection uninterruptibly and always registers its end.
 */
export const listen = (channel: string): Stream.Stream<string, SqlError, DbPool> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const pool = yield* DbPool
    const client = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const connection = new Pg.Client(pool.options)
          // Errors are reported through the stream below; an unheard "error" event would crash.
          connection.on("error", () => {})
          try {
            await connection.connect()
            await connection.query(`LISTEN ${Pg.escapeIdentifier(channel)}`)
          } catch (cause) {
            await connection.end().catch(() => {})
            throw cause
          }
          return connection
        },
        catch: (cause) => new SqlError({ cause, message: `Failed to LISTEN on ${channel}` })
      }),
      (connection) => Effect.promise(() => connection.end().catch(() => {})).pipe(Effect.timeoutOption(1000))
    )
    return Stream.async<string, SqlError>((emit) => {
      client.on("notification", (message) => {
        if (message.channel === channel) void emit.single(message.payload ?? "")
      })
      client.on("error", (cause) => void emit.fail(new SqlError({ cause, message: `LISTEN connection on ${channel} failed` })))
      client.on("end", () => void emit.fail(new SqlError({ cause: null, message: `LISTEN connection on ${channel} closed` })))
    })
  }))

/** What a pg connection offers for COPY FROM STDIN (pg's Connection has it; its type declarations do not). */
interface CopyInConnection {
  sendCopyFromChunk(chunk: Uint8Array): void
  endCopyFrom(): void
}

const canCopyIn = (connection: object): connection is CopyInConnection =>
  typeof Reflect.get(connection, "sendCopyFromChunk") === "function" && typeof Reflect.get(connection, "endCopyFrom") === "function"

/**
 * The pg client under a transaction's connection, for COPY: @effect/sql-pg 0.53 keeps it in the
 * connection's `pg` field (not part of its declared type). None when that is not so.
 */
export const pgClientOf = (connection: object): Option.Option<Pg.ClientBase> => {
  const client: unknown = Reflect.get(connection, "pg")
  return client instanceof Pg.Client ? Option.some(client) : Option.none()
}

/**
 * `COPY … FROM STDIN` of `data` on `client`, through pg's custom-query interface (what
 * pg-copy-streams builds on; that package is not installed). Not for PGlite, which cannot COPY
 * from the client.
 */
export const copyFromStdin = (client: Pg.ClientBase, statement: string, data: Uint8Array): Effect.Effect<void, SqlError> =>
  Effect.async<void, SqlError>((resume) => {
    let settled = false
    const settle = (outcome: Effect.Effect<void, SqlError>) => {
      if (settled) return
      settled = true
      resume(outcome)
    }
    client.query({
      submit: (connection: Pg.Connection) => connection.query(statement),
      handleCopyInResponse: (connection: Pg.Connection) => {
        if (!canCopyIn(connection)) return settle(Effect.fail(new SqlError({ cause: null, message: "This pg connection cannot COPY" })))
        connection.sendCopyFromChunk(data)
        connection.endCopyFrom()
      },
      handleCommandComplete: () => {},
      // pg drops a query once it failed: its ReadyForQuery goes to no one.
      handleError: (cause: Error) => settle(Effect.fail(new SqlError({ cause, message: "Failed to execute statement" }))),
      handleReadyForQuery: () => settle(Effect.void)
    })
  })
