/**
 * The catalog routes. Every check that can reject a request (blank query, unknown category,
 * bad cursor, malformed id) runs before the credit reserve, so invalid requests are never
 * charged; search and list then reserve 2 and settle ceil(rows / 25); get hook charges 1 at once
 * once the hook is found (one statement, no hold).
 */
import { Effect, Option } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { HooklineApi } from "../Api.js"
import { Secrets } from "../Config.js"
import { readCursor, signCursor } from "../Cursor.js"
import { NotFound, ValidationFailed } from "../Errors.js"
import { idPattern } from "../Ids.js"
import { chargedAtOnce, metered } from "../Ledger/Metering.js"
import { cursorBinding, HookCatalog, ListPosition, normaliseQuery, type Page, SearchPosition } from "./HookCatalog.js"

/** Credits a page of `rows` rows costs. */
export const pageCost = (rows: number) => Math.ceil(rows / 25)

const hookId = idPattern("hook")

export const HooksHandlers = HttpApiBuilder.group(HooklineApi, "hooks", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* HookCatalog
    const { cursorSecret } = yield* Secrets

    const respond = <P>(binding: string, page: Page<P>) => ({
      object: "list" as const,
      data: page.data,
      has_more: Option.isSome(page.next),
      next_cursor: Option.match(page.next, {
        onNone: () => null,
        onSome: (next) => signCursor(cursorSecret, binding, next)
      })
    })

    return handlers
      .handle("categories", () => catalog.categories)
      .handle("search", ({ query: params }) =>
        Effect.gen(function*() {
          const query = normaliseQuery(params.q)
          if (query === "") return yield* new ValidationFailed({ message: "q: must contain a non-blank character" })
          const binding = cursorBinding("search", query)
          const after = yield* readCursor(cursorSecret, binding, params.cursor, SearchPosition)
          return yield* metered({
            operation: "search",
            reserve: 2,
            run: () => catalog.search(query, after),
            cost: (page) => pageCost(page.data.length)
          }).pipe(Effect.map((page) => respond(binding, page)))
        }))
      .handle("list", ({ query: params }) =>
        Effect.gen(function*() {
          const binding = cursorBinding("list", params.category)
          const after = yield* readCursor(cursorSecret, binding, params.cursor, ListPosition)
          if (!(yield* catalog.categoryExists(params.category))) {
            return yield* new ValidationFailed({
              message: `category: unknown slug ${JSON.stringify(params.category)}; GET /v1/hooks/categories lists the valid ones`
            })
          }
          return yield* metered({
            operation: "list",
            reserve: 2,
            run: () => catalog.list(params.category, after),
            cost: (page) => pageCost(page.data.length)
          }).pipe(Effect.map((page) => respond(binding, page)))
        }))
      .handle("get", ({ params }) =>
        Effect.gen(function*() {
          const notFound = new NotFound({ message: `No hook ${JSON.stringify(params.id)}.` })
          if (!hookId.test(params.id)) return yield* notFound
          const hook = yield* catalog.hook(params.id)
          if (Option.isNone(hook)) return yield* notFound
          // The hook is found before anything is taken: an unknown id costs nothing.
          yield* chargedAtOnce({ operation: "hook", amount: 1, referenceId: params.id })
          return hook.value
        }))
  })
)
