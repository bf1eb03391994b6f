/**
 * Which database the admin CLI works on, in words for the person at the terminal, and whether an
 * embedded one exists: only `migrate` may create one (a typo'd or missing DATA_DIR must not quietly
 * answer from a new, empty database).
 */
import { Option, Redacted } from "effect"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { databaseLabel, type ServerConfig } from "../Config.js"

export const databaseInUse = (config: ServerConfig): string =>
  Option.match(config.databaseUrl, {
    onNone: () => `the embedded database in ${config.dataDir}`,
    onSome: (url) => `${databaseLabel(Redacted.value(url))} (DATABASE_URL)`
  })

/** Why a command other than migrate must not run on `dataDir`, or null when it holds a database. */
export const missingDataDir = (dataDir: string): string | null =>
  existsSync(join(dataDir, "pgdata"))
    ? null
    : `No Hookline database in ${dataDir}; nothing was created. DATA_DIR defaults to ./.hookline in the ` +
      "current directory (the project directory under npm run): set DATA_DIR to the directory the server uses, " +
      "or DATABASE_URL to its PostgreSQL. `npm run admin -- migrate` creates a new, empty database."
