/**
 * The framework floor: what the stack costs before Hookline adds anything. `bun floor.ts
 * framework` serves a minimal HttpApi on the same stack (one GET endpoint, a bearer
 * HttpApiMiddleware that looks the token up in a Map, a Schema response, served by Bun.serve
 * through HttpRouter.toWebHandler with tracing and the request logger off, as Hookline serves an
 * unsampled request); `bun floor.ts bare` answers the same route with a bare Bun.serve. Neither
 * touches the database. KEYS holds the accepted bearer tokens, comma-separated; PORT the port.
 * bench/core.ts compares Hookline's CPU per request with these.
 */
import { Context, Effect, Layer, Redacted, References, Schema } from "effect"
import { HttpMiddleware, HttpRouter, HttpServer } from "effect/http"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSecurity
} from "effect/http-api"

const port = Number(process.env.PORT ?? 0)
const keys = new Map((process.env.KEYS ?? "").split(",").filter((key) => key !== "").map((key, index) => [key, `acct_${index}`]))
const wallet = { object: "wallet" as const, monthly_balance: 1_000, monthly_period_end: null, topup_balance: 50_000_000 }

class Caller extends Context.Service<Caller, { readonly accountId: string }>()("floor/Caller") {}

class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {}, { httpApiStatus: 401 }) {}

class Authentication extends HttpApiMiddleware.Service<Authentication, { provides: Caller }>()("floor/Authentication", {
  error: Unauthorized,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

const Wallet = Schema.Struct({
  object: Schema.Literal("wallet"),
  monthly_balance: Schema.Number,
  monthly_period_end: Schema.NullOr(Schema.String),
  topup_balance: Schema.Number
})

class FloorApi extends HttpApi.make("floor").add(
  HttpApiGroup.make("wallet").add(HttpApiEndpoint.get("get", "/v1/wallet", { success: Wallet })).middleware(Authentication)
) {}

const AuthenticationLive = Layer.succeed(
  Authentication,
  Authentication.of({
    bearer: (httpEffect, { credential }) => {
      const accountId = keys.get(Redacted.value(credential))
      return accountId === undefined ? Effect.fail(new Unauthorized()) : Effect.provideService(httpEffect, Caller, { accountId })
    }
  })
)

const WalletLive = HttpApiBuilder.group(FloorApi, "wallet", (handlers) => handlers.handle("get", () => Effect.as(Caller, wallet)))

if (process.argv[2] === "bare") {
  const body = JSON.stringify(wallet)
  Bun.serve({
    port,
    hostname: "127.0.0.1",
    fetch: (request) => {
      const header = request.headers.get("authorization") ?? ""
      if (!header.startsWith("Bearer ") || !keys.has(header.slice(7))) return new Response(null, { status: 401 })
      return new Response(body, { headers: { "content-type": "application/json" } })
    }
  })
} else {
  const app = HttpApiBuilder.layer(FloorApi).pipe(
    Layer.provide(WalletLive),
    Layer.provide(AuthenticationLive),
    Layer.provide(HttpServer.layerServices),
    Layer.merge(Layer.succeed(References.TracerEnabled, false)),
    Layer.merge(Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true))
  )
  const { handler } = HttpRouter.toWebHandler(app, { disableLogger: true })
  const server = Bun.serve({ port, hostname: "127.0.0.1", fetch: (request) => handler(request) })
  console.log(`listening on http://127.0.0.1:${server.port}`)
}
