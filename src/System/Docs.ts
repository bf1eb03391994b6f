/**
 * GET /docs: Swagger UI over the API's own OpenAPI document, with no external assets.
 *
 * The page is HttpApiSwagger's as it renders it (Swagger UI and the spec inlined, about 2 MB; an
 * inlined spec also keeps Swagger UI from calling its online validator), served compressed with
 * brotli or gzip when the client accepts it (about a quarter of the size). Each form is made
 * once, on first demand, off the event loop.
 */
import { Effect } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiSwagger } from "effect/http-api"
import { promisify } from "node:util"
import { brotliCompress, constants, gzip } from "node:zlib"
import { HooklineApi } from "../Api.js"

export const docsPath = "/docs"

/** HttpApiSwagger's page for the API, rendered once through its own router (to be compressed once). */
const docsPage = Effect.promise(async () => {
  const { dispose, handler } = HttpRouter.toWebHandler(HttpApiSwagger.layer(HooklineApi, { path: docsPath }), {
    disableLogger: true
  })
  try {
    return new Uint8Array(await (await handler(new Request(`http://localhost${docsPath}`))).arrayBuffer())
  } finally {
    await dispose()
  }
})

const compressBrotli = promisify(brotliCompress)
const compressGzip = promisify(gzip)

export type DocsEncoding = "br" | "gzip" | "identity"

/** The best encoding the Accept-Encoding header allows (`q=0` refuses one), brotli first. */
export const chooseEncoding = (acceptEncoding: string | undefined): DocsEncoding => {
  const accepted = new Map<string, number>()
  for (const part of (acceptEncoding ?? "").split(",")) {
    const [name, ...params] = part.trim().toLowerCase().split(";")
    if (name === "") continue
    const q = params.map((param) => /^\s*q=([\d.]+)\s*$/.exec(param)).find((match) => match !== null)
    accepted.set(name, q === undefined || q === null ? 1 : Number(q[1]))
  }
  const allows = (name: string) => (accepted.get(name) ?? accepted.get("*") ?? 0) > 0
  if (allows("br")) return "br"
  if (allows("gzip")) return "gzip"
  return "identity"
}

export const DocsLive = HttpRouter.use((router) =>
  Effect.gen(function*() {
    const plain = yield* Effect.cached(docsPage)
    const forms: Record<DocsEncoding, Effect.Effect<Uint8Array>> = {
      identity: plain,
      br: yield* Effect.cached(Effect.flatMap(plain, (page) =>
        Effect.promise(() =>
          compressBrotli(page, {
            params: { [constants.BROTLI_PARAM_QUALITY]: 5, [constants.BROTLI_PARAM_SIZE_HINT]: page.length }
          })
        ))),
      gzip: yield* Effect.cached(Effect.flatMap(plain, (page) => Effect.promise(() => compressGzip(page, { level: 6 }))))
    }
    yield* router.add(
      "GET",
      docsPath,
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const encoding = chooseEncoding(request.headers["accept-encoding"])
        return HttpServerResponse.uint8Array(yield* forms[encoding], {
          contentType: "text/html; charset=utf-8",
          headers: encoding === "identity" ? { vary: "accept-encoding" } : { vary: "accept-encoding", "content-encoding": encoding }
        })
      })
    )
  })
)
