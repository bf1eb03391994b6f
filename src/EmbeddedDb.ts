/**
 * The embedded Postgres used when DATABASE_URL is unset: PGlite in this process, its data in
 * DATA_DIR/pgdata, reached by the same sql-pg client as a server, over in-process connections that
 * speak the wire protocol (EmbeddedSession.ts: one session, held by one connection at a time).
 *
 * - A pid lock file: two processes opening one data directory lose writes.
 * - No LISTEN/NOTIFY between connections (a notification comes back to the notifying
 *   connection, not to the listener), so background work polls (DatabaseMode.embedded).
 * - No cancel and no statement_timeout: PGlite runs a statement synchronously on this thread.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { Data, Effect } from "effect"
import { ConnectionError, SqlError } from "effect/sql/SqlError"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { EmbeddedSession, type EmbeddedSessionOptions } from "./EmbeddedSession.js"

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

const failure = (cause: unknown, message: string) =>
  new SqlError({ reason: new ConnectionError({ cause, message, operation: "connect" }) })

/**
 * Opens PGlite on DATA_DIR/pgdata; answers its session, whose `connect` makes client connections.
 * Closing the scope closes PGlite (flushing it to disk) and frees the lock.
 */
export const embeddedDatabase = (dataDir: string, options: EmbeddedSessionOptions) =>
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
    return new EmbeddedSession(pglite, options)
  })
