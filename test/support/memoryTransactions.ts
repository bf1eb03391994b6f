/**
 * A SqlClient for services whose repositories live in memory: their transactions still open,
 * commit and roll back through SqlClient, so this one keeps the memory consistent with them.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Stream } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient, type SqlConnection, SqlError } from "effect/sql"

/** Takes a copy of the memory states and answers what puts that copy back. */
export type SaveStates = () => () => void

/**
 * Copies of plain state objects (structured clones), written back into the same objects so
 * the repositories holding them see the restored values. A restore clones again: one save
 * may be restored more than once (a savepoint rolled back twice).
 */
export const cloneStates = (states: ReadonlyArray<object>): SaveStates => () => {
  const copies = states.map((state) => structuredClone(state))
  return () => states.forEach((state, index) => Object.assign(state, structuredClone(copies[index])))
}

/**
 * BEGIN and SAVEPOINT keep a copy of the states (`save`), ROLLBACK puts it back, COMMIT keeps
 * the changes. Any other statement is refused: there is no database.
 */
export const memoryTransactions = (save: SaveStates) =>
  Layer.effect(
    SqlClient.SqlClient,
    Effect.gen(function*() {
      // By savepoint name; the transaction's own under "".
      const restorePoints = new Map<string, () => void>()
      const refused = (sql: string) => new SqlError.SqlError({ reason: new SqlError.UnknownError({ cause: null, message: `no database in memory: ${sql}` }) })
      const control = (sql: string) =>
        Effect.suspend((): Effect.Effect<ReadonlyArray<never>, SqlError.SqlError> => {
          const name = sql.split(" ").at(-1) ?? ""
          if (sql === "BEGIN") restorePoints.set("", save())
          else if (sql.startsWith("SAVEPOINT ")) restorePoints.set(name, save())
          else if (sql === "COMMIT") restorePoints.clear()
          else if (sql.startsWith("RELEASE SAVEPOINT ")) restorePoints.delete(name)
          else if (sql === "ROLLBACK") {
            restorePoints.get("")?.()
            restorePoints.clear()
          } else if (sql.startsWith("ROLLBACK TO SAVEPOINT ")) restorePoints.get(name)?.()
          else return Effect.fail(refused(sql))
          return Effect.succeed([])
        })
      const connection: SqlConnection.Connection = {
        execute: control,
        executeUnprepared: control,
        executeRaw: (sql) => Effect.fail(refused(sql)),
        executeValues: (sql) => Effect.fail(refused(sql)),
        executeValuesUnprepared: (sql) => Effect.fail(refused(sql)),
        executeStream: (sql) => Stream.fail(refused(sql))
      }
      return yield* SqlClient.make({
        acquirer: Effect.succeed(connection),
        compiler: PgClient.makeCompiler(),
        driver: "memory",
        spanAttributes: [],
        releaseSavepoint: (name) => `RELEASE SAVEPOINT ${name}`
      })
    }).pipe(Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make))
  )
