/**
 * GET /docs: Swagger UI over the API's own OpenAPI document, with no external assets.
 *
 * The page is HttpApiSwagger's (Swagger UI and the spec inlined, about 2 MB), with two changes:
 * `validatorUrl: "none"` (otherwise Swagger UI sends the spec to validator.swagger.io and shows
 * a broken badge offline), and compression: brotli or gzip when the client accepts it (about a
 * quarter of the size). Each form is made once, on first demand, off the event loop.
 */
import { Effect } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiSwagger } from "effect/http-api"
import { promisify } from "node:util"
import { brotliCompress, constants, gzip } from "node:zlib"
import { HooklineApi } from "../Api.js"

export const docsPath = "/docs"

/** Where the Swagger UI options are written in HttpApiSwagger's page. */
const swaggerOptionsAnchor = 'dom_id: "#swagger-ui",'

/** HttpApiSwagger's page for the API, rendered once through its own router. */
const renderSwaggerPage = Effect.promise(async () => {
  const { dispose, handler } = HttpRouter.toWebHandler(HttpApiSwagger.layer(HooklineApi, { path: docsPath }), {
    disableLogger: true
  })
  try {
    return await (await handler(new Request(`http://localhost${docsPath}`))).text()
  } finally {
    await dispose()
  }
})

/** The page with Swagger UI's online validator turned off. */
export const docsPage = Effect.flatMap(renderSwaggerPage, (html) =>
  html.includes(swaggerOptionsAnchor)
    ? Effect.succeed(Buffer.from(html.replace(swaggerOptionsAnchor, `${swaggerOptionsAnchor}\n        validatorUrl: "none",`)))
    // A Swagger page of another shape: fail loudly rather than serve a page that calls out.
    : Effect.die(new Error("HttpApiSwagger's page changed: cannot set validatorUrl")))

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
