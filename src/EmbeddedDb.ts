/**
 * The embedded Postgres used when DATABASE_URL is unset: PGlite in this process, reached
 * through its node-postgres adapter so the same sql-pg client code runs against it.
 *
 * - Pool size exactly 1: a larger pool over one PGlite instance returns wrong rows silently.
 * - A pid lock file: two processes opening one data directory lose writes.
 * - No LISTEN/NOTIFY in this mode; background work polls.
 */
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { createPgConfig } from "@electric-sql/pglite/node-postgres"
import { SqlError } from "@effect/sql/SqlError"
import { Data, Effect } from "effect"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import Pg from "pg"

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

/** A pg Pool over an embedded PGlite living in DATA_DIR/pgdata; closing the scope closes both. */
export const embeddedPool = (dataDir: string, types: Pg.CustomTypesConfig) =>
  Effect.gen(function*() {
    yield* acquireLock(dataDir)
    const pglite = yield* Effect.acquireRelease(
      Effect.tryPromise({
        // pg_trgm bounds the search's substring fallback (migrations/0006_substring_search.ts).
        try: () => PGlite.create(join(dataDir, "pgdata"), { extensions: { pg_trgm } }),
        catch: (cause) => new SqlError({ cause, message: "Failed to open the embedded database" })
      }),
      (db) => Effect.promise(() => db.close())
    )
    return yield* Effect.acquireRelease(
      Effect.sync(() => new Pg.Pool({ ...createPgConfig(pglite), max: 1, types })),
      (pool) => Effect.promise(() => pool.end())
    )
  })
