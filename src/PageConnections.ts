/**
 * The catalog pages' own connections (see `pageClient`).
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Option } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import { pageConnections, ServerConfig, sessionTimeouts } from "./Config.js"
import { idleTimeoutOf, networkOptions, numberTypes } from "./Sql.js"

/**
 * The catalog pages' connections, apart from the server's shared pool, each carrying one statement
 * at a time: queries a deadline must be able to cancel on the server run there (`onOwnConnection`).
 * Pinned from the shared, pipelined pool instead, a page first waited for its connection's
 * pipeline to drain and then kept that connection from the other requests' statements: on the
 * catalog's cold mix, pages on connections of their own answered 12–19 % more pages per second at
 * 14–17 % less of the server's CPU per request (bench/README.md). On the embedded database, whose one
 * session serves every connection in turn, it is the server's own client.
 */
export const pageClient = Effect.gen(function*() {
  const config = yield* ServerConfig
  const size = pageConnections(config)
  if (Option.isNone(config.databaseUrl) || size === 0) return yield* SqlClient.SqlClient
  const client: SqlClient.SqlClient = yield* PgClient.make({
    ...networkOptions(config.databaseUrl.value, config, numberTypes()),
    maxConnections: size,
    idleTimeout: idleTimeoutOf(config.pgIdleTimeout),
    startupParameters: sessionTimeouts(config)
  }).pipe(Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make))
  return client
})
