/**
 * The framework floor: what the stack costs before Hookline adds anything. `bun floor.ts
 * framework` serves a minimal HttpApi on the same stack (one GET endpoint, a bearer
 * HttpApiMiddleware that looks the token up in a Map, a Schema.Class response, through
 * BunHttpServer with its default request tracing); `bun floor.ts bare` answers the same route
 * with a bare Bun.serve. Neither touches the database. KEYS holds the accepted bearer tokens,
 * comma-separated; PORT the port. bench/core.ts compares Hookline's CPU per request with these.
 */
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity,
  HttpServer
} from "@effect/platform"
import { BunHttpServer, BunRuntime } from "@effect/platform-bun"
import { Context, Effect, Layer, Redacted, Schema } from "effect"

const port = Number(process.env.PORT ?? 0)
const keys = new Map((process.env.KEYS ?? "").split(",").filter((key) => key !== "").map((key, index) => [key, `acct_${index}`]))
const wallet = { object: "wallet" as const, monthly_balance: 1_000, monthly_period_end: null, topup_balance: 50_000_000 }

class Caller extends Context.Tag("floor/Caller")<Caller, { readonly accountId: string }>() {}

class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {}, HttpApiSchema.annotations({ status: 401 })) {}

class Authentication extends HttpApiMiddleware.Tag<Authentication>()("floor/Authentication", {
  provides: Caller,
  failure: Unauthorized,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

class Wallet extends Schema.Class<Wallet>("Wallet")({
  object: Schema.Literal("wallet"),
  monthly_balance: Schema.Number,
  monthly_period_end: Schema.NullOr(Schema.String),
  topup_balance: Schema.Number
}) {}

class FloorApi extends HttpApi.make("floor").add(
  HttpApiGroup.make("wallet").add(HttpApiEndpoint.get("get", "/v1/wallet").addSuccess(Wallet)).middleware(Authentication)
) {}

const AuthenticationLive = Layer.succeed(
  Authentication,
  Authentication.of({
    bearer: (token) => {
      const accountId = keys.get(Redacted.value(token))
      return accountId === undefined ? Effect.fail(new Unauthorized()) : Effect.succeed({ accountId })
    }
  })
)

const WalletLive = HttpApiBuilder.group(FloorApi, "wallet", (handlers) =>
  handlers.handle("get", () => Effect.as(Caller, new Wallet(wallet))))

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
  HttpApiBuilder.serve().pipe(
    Layer.provide(HttpApiBuilder.api(FloorApi).pipe(Layer.provide(WalletLive), Layer.provide(AuthenticationLive))),
    HttpServer.withLogAddress,
    Layer.provide(BunHttpServer.layer({ port, hostname: "127.0.0.1" })),
    Layer.launch,
    BunRuntime.runMain
  )
}
