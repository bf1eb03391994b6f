/**
 * The admin CLI: `npm run admin -- <command>`. Each command prints one JSON object on stdout
 * (progress goes to stderr).
 *
 * Every command goes through the admin API, so there is one implementation of each operation:
 * - when a server holds the embedded data directory, the CLI calls that running server;
 * - otherwise it serves the API in its own process on a loopback port (no background work)
 *   against DATABASE_URL or the embedded database, and calls that.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, ConfigProvider, Context, Data, Effect, Layer, Option, Redacted, References } from "effect"
import { FetchHttpClient, HttpServer } from "effect/http"
import { randomBytes } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { apiOnlyLayer } from "../App.js"
import * as Server from "../System/Server.js"
import { loadServerSecrets, ServerConfig } from "../Config.js"
import { type HooklineClient, makeHooklineClient } from "../client.js"
import { dataDirHolder } from "../EmbeddedDb.js"
import { demoCategories } from "../Hooks/DemoData.js"
import { SqlLive } from "../Sql.js"
import { databaseInUse, missingDataDir } from "./Target.js"
import { defaultChunking, importCommand, importExampleLine, seedDemoCommand } from "./ImportCommand.js"
import type { Plan, Scope } from "../Auth/Domain.js"
import { usageCommand, usageHelp, usageOptions } from "./UsageCli.js"

const usage = `Usage: npm run admin -- <command>
  migrate
  accounts create --plan <plan> [--name N] [--monthly-grant N] [--monthly-balance N] [--topup-balance N]
  accounts get <account_id>
  accounts update <account_id> [--plan <plan>] [--suspended true|false]
  keys create <account_id> [--scopes hooks:read,predict:write,webhooks:write] [--spend-limit N]
  keys update <key_id> --spend-limit N|none
  keys revoke <key_id>
  credits grant <account_id> --bucket monthly|topup --amount N [--reason R] [--reference R] [--expires-at ISO-8601]
  transactions <account_id> [--limit N] [--cursor C]
${usageHelp}
  (every POST also takes --idempotency-key K)
  catalog categories <file.json>        (a JSON array of { slug, name })
  catalog import <file.ndjson|file.json> [--from-line N] [--chunk-bytes N]
                                        (NDJSON goes in requests of at most --chunk-bytes, default 32 MiB)
      one hook per line: text and platform required; id optional (derived from platform + source_url,
      so then source_url is required); every other field of a hook may be left out or null, e.g.
      ${importExampleLine}
  catalog seed-demo --count N [--from-line N] (the deterministic demo catalog: categories and hooks 0 … N-1)
  help                                  (this text; also --help, -h)

Where: with DATABASE_URL set, that PostgreSQL database; otherwise the embedded database in DATA_DIR
(default ./.hookline, in the project directory under npm run), through the server running on it if
there is one. Only migrate creates a new data directory.`

/** A mistake at the terminal: its message alone goes to stderr. */
class UsageError extends Error {}

/** Tells the person at the terminal which server or database the command uses (stdout is the JSON answer). */
const note = (text: string) => Effect.sync(() => process.stderr.write(`hookline admin: ${text}\n`))

const cliOptions = {
  plan: { type: "string" },
  name: { type: "string" },
  "monthly-grant": { type: "string" },
  "monthly-balance": { type: "string" },
  "topup-balance": { type: "string" },
  suspended: { type: "string" },
  scopes: { type: "string" },
  "spend-limit": { type: "string" },
  bucket: { type: "string" },
  amount: { type: "string" },
  reason: { type: "string" },
  reference: { type: "string" },
  "expires-at": { type: "string" },
  "idempotency-key": { type: "string" },
  limit: { type: "string" },
  cursor: { type: "string" },
  count: { type: "string" },
  "from-line": { type: "string" },
  "chunk-bytes": { type: "string" },
  ...usageOptions,
  help: { type: "boolean", short: "h" }
} as const

// Hand-written rather than effect/cli: effect/cli prints its own help layout and adds global flags
// (--version, --wizard, --completions, --log-level), while the usage above and these flags are the contract.
const parsed = (() => {
  try {
    return parseArgs({ args: process.argv.slice(2), allowPositionals: true, options: cliOptions })
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n${usage}\n`)
    process.exit(1)
  }
})()
const { positionals, values } = parsed

const int = (name: string, value: string | undefined) => {
  if (value === undefined) return undefined
  const parsed = Number(value)
  if (!Number.isInteger(parsed)) throw new UsageError(`--${name} must be an integer`)
  return parsed
}
const date = (name: string, value: string | undefined) => {
  if (value === undefined) return undefined
  const parsed = new Date(value)
  if (Number.isNaN(parsed.getTime())) throw new UsageError(`--${name} must be an ISO 8601 date-time, e.g. 2027-01-31T00:00:00Z`)
  return parsed
}
/** The same object without its undefined properties: a payload leaves an absent option out. */
const defined = <T extends object>(fields: T): T =>
  Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) as T

const arg = (index: number, what: string) => {
  const value = positionals[index]
  if (value === undefined) throw new UsageError(`missing ${what}`)
  return value
}

/** `--help`: the usage on stdout, exit 0. */
class Help extends Data.TaggedError("Help") {}

/** Where the admin API is: the running server's, or one this process serves itself. */
const adminEndpoint = Effect.gen(function*() {
  const config = yield* ServerConfig
  const missing = Option.isNone(config.databaseUrl) ? missingDataDir(config.dataDir) : null
  if (missing !== null) return yield* Effect.die(new UsageError(missing))
  const holder = Option.isNone(config.databaseUrl) ? dataDirHolder(config.dataDir) : null
  const serverFile = join(config.dataDir, "server.json")
  if (holder !== null && existsSync(serverFile)) {
    const { url } = JSON.parse(readFileSync(serverFile, "utf8")) as { url: string }
    yield* note(`using the server running at ${url} (process ${holder}, data in ${config.dataDir})`)
    const secrets = yield* loadServerSecrets
    if (secrets.adminToken === null) return yield* Effect.die(new UsageError("The running server has no admin token (set ADMIN_TOKEN)."))
    return { baseUrl: url, adminToken: Redacted.value(secrets.adminToken) }
  }
  yield* note(`using ${databaseInUse(config)} (no server needed)`)
  // Serve the API in this process on a loopback port, with a one-time admin token.
  const adminToken = randomBytes(24).toString("base64url")
  const provider = ConfigProvider.layerAdd(ConfigProvider.fromUnknown({ ADMIN_TOKEN: adminToken }), { asPrimary: true })
  const app = yield* Layer.build(apiOnlyLayer(Server.layerLoopback(2 ** 31)).pipe(Layer.provide(provider)))
  const address = Context.get(app, HttpServer.HttpServer).address
  const port = address._tag === "UnixPathAddress" ? 0 : address.port
  return { baseUrl: `http://127.0.0.1:${port}`, adminToken }
})

/** `keys create | update | revoke`. */
const keysCommand = (client: HooklineClient, action: string | undefined) => {
  switch (action) {
    case "create":
      return client.admin.createKey({
        params: { id: arg(2, "account id") },
        payload: defined({
          scopes: values.scopes === undefined ? undefined : (values.scopes.split(",") as Array<Scope>),
          spend_limit: int("spend-limit", values["spend-limit"])
        })
      })
    case "update": {
      const limit = values["spend-limit"]
      if (limit === undefined) throw new UsageError("keys update needs --spend-limit N (or none)")
      return client.admin.updateKey({
        params: { id: arg(2, "key id") },
        payload: { spend_limit: limit === "none" ? null : int("spend-limit", limit) ?? null }
      })
    }
    case "revoke":
      return client.admin.revokeKey({ params: { id: arg(2, "key id") } })
    default:
      throw new UsageError(`unknown command: ${positionals.join(" ")}\n${usage}`)
  }
}

const command = Effect.gen(function*() {
  const [group, action] = positionals
  if (values.help === true || group === "help") return yield* new Help()
  if (group === undefined) return yield* Effect.die(new UsageError(usage))
  if (group === "migrate") {
    yield* note(`migrating ${databaseInUse(yield* ServerConfig)}`)
    yield* Layer.build(SqlLive)
    return { object: "migration", status: "applied" }
  }
  const { baseUrl, adminToken } = yield* adminEndpoint
  const client = yield* makeHooklineClient({ baseUrl, apiKey: adminToken, idempotencyKey: values["idempotency-key"] })
  if (group === "transactions") {
    return yield* client.admin.listTransactions({
      params: { id: arg(1, "account id") },
      query: defined({ limit: int("limit", values.limit), cursor: values.cursor })
    })
  }
  if (group === "usage") return yield* usageCommand(client, arg(1, "account id"), values)
  if (group === "keys") return yield* keysCommand(client, action)
  switch (`${group} ${action}`) {
    case "accounts create":
      return yield* client.admin.createAccount({
        payload: defined({
          plan: (values.plan ?? "") as Plan,
          name: values.name,
          monthly_grant: int("monthly-grant", values["monthly-grant"]),
          monthly_balance: int("monthly-balance", values["monthly-balance"]),
          topup_balance: int("topup-balance", values["topup-balance"])
        })
      })
    case "accounts get":
      return yield* client.admin.getAccount({ params: { id: arg(2, "account id") } })
    case "accounts update":
      return yield* client.admin.updateAccount({
        params: { id: arg(2, "account id") },
        payload: defined({
          plan: values.plan as Plan | undefined,
          suspended: values.suspended === undefined ? undefined : values.suspended === "true"
        })
      })
    case "credits grant":
      return yield* client.admin.grantCredits({
        params: { id: arg(2, "account id") },
        payload: defined({
          bucket: (values.bucket ?? "") as "monthly" | "topup",
          amount: int("amount", values.amount) ?? 0,
          reason: values.reason,
          reference: values.reference,
          expires_at: date("expires-at", values["expires-at"])
        })
      })

    case "catalog categories":
      return yield* client.admin.putCategories({
        payload: JSON.parse(readFileSync(arg(2, "file"), "utf8")) as Array<{ slug: string; name: string }>
      })
    case "catalog import":
      return yield* importCommand({ baseUrl, adminToken }, arg(2, "file"), chunking())
    case "catalog seed-demo": {
      const count = int("count", values.count) ?? 0
      if (count < 1) throw new UsageError("--count must be a positive integer")
      yield* client.admin.putCategories({ payload: demoCategories.map(({ slug, name }) => ({ slug, name })) })
      return yield* seedDemoCommand({ baseUrl, adminToken }, count, chunking())
    }
    default:
      return yield* Effect.die(new UsageError(`unknown command: ${positionals.join(" ")}\n${usage}`))
  }
})

const chunking = () => ({
  ...defaultChunking,
  fromLine: int("from-line", values["from-line"]) ?? defaultChunking.fromLine,
  chunkBytes: int("chunk-bytes", values["chunk-bytes"]) ?? defaultChunking.chunkBytes
})

/** What stderr says when a command fails: a usage mistake as is, an error with its tag. */
const failureMessage = (cause: Cause.Cause<unknown>): string => {
  if (Cause.hasInterruptsOnly(cause)) return "interrupted"
  const failure = Cause.squash(cause)
  if (failure instanceof UsageError) return failure.message
  if (failure !== null && typeof failure === "object" && "message" in failure) {
    const tag = "_tag" in failure && typeof failure._tag === "string" ? failure._tag : "Error"
    return `${tag}: ${String(failure.message)}`
  }
  return Cause.pretty(cause)
}

const program = command.pipe(
  Effect.scoped,
  Effect.provide(FetchHttpClient.layer),
  Effect.provideService(References.MinimumLogLevel, "Warn"),
  Effect.catchTag("Help", () => Effect.succeed(usage)),
  Effect.matchCauseEffect({
    onSuccess: (result) =>
      Effect.sync(() => process.stdout.write((typeof result === "string" ? result : JSON.stringify(result, null, 2)) + "\n")),
    onFailure: (cause) =>
      Effect.sync(() => {
        process.stderr.write(failureMessage(cause) + "\n")
        process.exitCode = 1
      })
  }),
  // Exits even when something the command opened still holds the event loop (a keep-alive socket).
  Effect.andThen(Effect.sync(() => process.exit()))
)

// runMain: Ctrl-C or SIGTERM interrupts the command, so the in-process server and database close.
NodeRuntime.runMain(program)
