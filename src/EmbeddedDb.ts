/**
 * The embedded Postgres used when DATABASE_URL is unset: PGlite in this process, its data in
 * DATA_DIR/pgdata, served over the PostgreSQL wire protocol on a unix socket inside DATA_DIR
 * (@electric-sql/pglite-socket), so the same sql-pg client reaches it as it reaches a server.
 *
 * - PGlite is one backend session behind a queue of protocol messages: the socket server runs
 *   them one at a time and, while a transaction is open, only its connection's.
 * - A pid lock file: two processes opening one data directory lose writes.
 * - No LISTEN/NOTIFY over the socket (a notification comes back on the notifying connection, not
 *   on the listener's), so background work polls (DatabaseMode.embedded).
 * - No cancel: the socket server ignores CancelRequest, so an interrupted statement runs to its end.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Data, Effect } from "effect"
import { ConnectionError, SqlError } from "effect/sql/SqlError"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

export class DataDirLocked extends Data.TaggedError("DataDirLocked")<{ readonly pid: number; readonly dataDir: string }> {
  override get message() {
    return `The data directory ${this.dataDir} is held by process ${this.pid}; stop it or use another DATA_DIR.`
  }
}

const lockFile = (dataDir: string) => join(dataDir, "server.pid")

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** The pid holding the data directory, if a live process does. */
export const dataDirHolder = (dataDir: string): number | null => {
  const file = lockFile(dataDir)
  if (!existsSync(file)) return null
  const pid = Number.parseInt(readFileSync(file, "utf8"), 10)
  return Number.isFinite(pid) && pid !== process.pid && isAlive(pid) ? pid : null
}

const acquireLock = (dataDir: string) =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      mkdirSync(dataDir, { recursive: true })
      const holder = dataDirHolder(dataDir)
      if (holder !== null) return Effect.fail(new DataDirLocked({ pid: holder, dataDir }))
      // A stale file (its process is gone) is replaced; `wx` makes two racing starters fail one.
      rmSync(lockFile(dataDir), { force: true })
      try {
        writeFileSync(lockFile(dataDir), String(process.pid), { flag: "wx" })
      } catch {
        return Effect.fail(new DataDirLocked({ pid: dataDirHolder(dataDir) ?? -1, dataDir }))
      }
      return Effect.void
    }),
    () => Effect.sync(() => rmSync(lockFile(dataDir), { force: true }))
  )

/** The longest unix socket path every platform accepts (sun_path is 104 bytes on macOS, 108 on Linux). */
const longestSocketPath = 100

/**
 * Where the socket listens: inside DATA_DIR, or (a DATA_DIR too deep for a socket path) in the
 * temp directory under a name derived from DATA_DIR, so one directory always has one socket.
 */
export const socketPath = (dataDir: string): string => {
  const inside = join(dataDir, ".s.PGSQL.5432")
  if (inside.length <= longestSocketPath) return inside
  return join(tmpdir(), `hookline-${createHash("sha256").update(dataDir).digest("hex").slice(0, 16)}.sock`)
}

const failure = (cause: unknown, message: string) =>
  new SqlError({ reason: new ConnectionError({ cause, message, operation: "connect" }) })

/**
 * Opens PGlite on DATA_DIR/pgdata and serves it on a unix socket; answers the socket's path.
 * Closing the scope stops the socket server, closes PGlite (flushing it to disk) and frees the lock.
 * `maxConnections`: how many client connections the socket server accepts at once.
 */
export const embeddedDatabase = (dataDir: string, maxConnections: number) =>
  Effect.gen(function*() {
    yield* acquireLock(dataDir)
    // The first start is the slow one (initdb, then the migrations): say so before it begins.
    yield* Effect.logInfo(
      existsSync(join(dataDir, "pgdata"))
        ? `opening the embedded database in ${dataDir}`
        : `creating the embedded database in ${dataDir} (first start: PostgreSQL is initialised and migrated, a few seconds, longer on a busy machine)`
    )
    const pglite = yield* Effect.acquireRelease(
      Effect.tryPromise({
        // pg_trgm bounds the search's substring fallback (migrations/0006_substring_search.ts).
        try: () => PGlite.create(join(dataDir, "pgdata"), { extensions: { pg_trgm } }),
        catch: (cause) => failure(cause, "Failed to open the embedded database")
      }),
      (db) => Effect.promise(() => db.close()).pipe(Effect.timeoutOption("10 seconds"))
    )
    const path = socketPath(dataDir)
    yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          // Left behind by a process that died holding the lock (we hold it now): nobody listens there.
          rmSync(path, { force: true })
          const server = new PGLiteSocketServer({ db: pglite, path, maxConnections })
          await server.start()
          return server
        },
        catch: (cause) => failure(cause, `Failed to serve the embedded database on ${path}`)
      }),
      (server) =>
        Effect.promise(() => server.stop()).pipe(
          Effect.timeoutOption("5 seconds"),
          Effect.andThen(Effect.sync(() => rmSync(path, { force: true })))
        )
    )
    return path
  })
