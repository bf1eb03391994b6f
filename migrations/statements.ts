/**
 * Runs a migration's SQL script one statement at a time. @effect/sql-pg sends every statement
 * through the extended protocol, which takes one statement per call, so a script is cut at its
 * top-level semicolons: not inside quotes, dollar-quoted bodies or comments.
 * (Not a migration itself: the migrator only loads files named NNNN_name.ts.)
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/** The statements of `script`, each without its semicolon; blank ones dropped. */
export const splitStatements = (script: string): Array<string> => {
  const statements: Array<string> = []
  let start = 0
  let i = 0
  const skipTo = (end: string, from: number) => {
    const at = script.indexOf(end, from)
    return at === -1 ? script.length : at + end.length
  }
  while (i < script.length) {
    const c = script[i]
    if (c === "-" && script[i + 1] === "-") i = skipTo("\n", i + 2)
    else if (c === "/" && script[i + 1] === "*") i = skipTo("*/", i + 2)
    else if (c === "'") i = skipTo("'", i + 1) // '' inside a literal is two literals back to back: same cut points
    else if (c === "\"") i = skipTo("\"", i + 1)
    else if (c === "$") {
      const tag = /^\$[A-Za-z_]*\$/.exec(script.slice(i, i + 64))
      i = tag === null ? i + 1 : skipTo(tag[0], i + tag[0].length)
    } else if (c === ";") {
      statements.push(script.slice(start, i))
      i = start = i + 1
    } else i++
  }
  statements.push(script.slice(start))
  return statements.map((statement) => statement.trim()).filter((statement) => statement !== "")
}

/** Runs each statement of `script` in order (inside the migrator's transaction). */
export const runScript = (script: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.forEach(splitStatements(script), (statement) => sql.unsafe(statement), { discard: true }))
