/**
 * What every repository's statements share: the boundary. `statement(name, run)` is `run` with
 * every failure (database, row decoding, no row for `single`) made a defect, as orDieOnDb does,
 * and a span named `Repo.name` in a traced fiber (an unsampled request pays nothing for it).
 * Repositories build `run` with SqlSchema, whose only failures are those.
 */
import { Effect } from "effect"
import { traced } from "./Observability/Tracing.js"

export const repoStatement = (repo: string) =>
<I, A, E, R>(name: string, run: (request: I) => Effect.Effect<A, E, R>) =>
(request: I): Effect.Effect<A, never, R> => run(request).pipe(Effect.orDie, traced(`${repo}.${name}`))
