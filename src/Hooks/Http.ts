/** The catalog routes: each decodes, makes one HookCatalog call (which checks, prices and pages), and answers. */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { HooklineApi } from "../Api.js"
import { HookCatalog } from "./HookCatalog.js"

export const HooksHandlers = HttpApiBuilder.group(HooklineApi, "hooks", (handlers) =>
  Effect.gen(function*() {
    const catalog = yield* HookCatalog
    return handlers
      .handle("categories", () => catalog.categories)
      .handle("search", ({ query }) => catalog.searchRequest(query))
      .handle("list", ({ query }) => catalog.listRequest(query))
      .handle("get", ({ params }) => catalog.hookRequest(params.id))
  })
)
