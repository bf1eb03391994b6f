/**
 * Server-wide configuration, read from the environment through Effect Config with the
 * contract's values as defaults. Each area keeps its own settings beside its code
 * (Ledger/Config.ts, Predictions/Config.ts, ...); this file holds what the whole server shares.
 */
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"

export const ServerConfig = Config.all({
  port: Config.integer("PORT").pipe(Config.withDefault(8080)),
  host: Config.string("HOST").pipe(Config.withDefault("0.0.0.0")),
  publicBaseUrl: Config.option(Config.string("PUBLIC_BASE_URL")),
  databaseUrl: Config.option(Config.redacted("DATABASE_URL")),
  dataDir: Config.string("DATA_DIR").pipe(Config.withDefault("./.hookline"), Config.map((dir) => resolve(dir))),
  pgMaxConnections: Config.integer("PG_MAX_CONNECTIONS").pipe(Config.withDefault(10)),
  maxJsonBodyBytes: Config.integer("MAX_JSON_BODY_BYTES").pipe(Config.withDefault(64 * 1024)),
  seedDemo: Config.boolean("SEED_DEMO").pipe(Config.withDefault(true)),
  demoCatalogSize: Config.integer("DEMO_CATALOG_SIZE").pipe(Config.withDefault(2_000))
})
export type ServerConfig = Config.Config.Success<typeof ServerConfig>

/** The address clients reach this server on (upload links are built from it). */
export const publicBaseUrl = (config: ServerConfig): string =>
  Option.getOrElse(config.publicBaseUrl, () => `http://localhost:${config.port}`).replace(/\/+$/, "")

/**
 * Server secrets. Taken from the environment when set; otherwise generated once and kept in
 * DATA_DIR/secrets.json (mode 0600) so restarts and several processes on one host agree.
 * Production deployments set them explicitly (see README, "Configuration").
 */
export interface ServerSecrets {
  /** null: the admin API answers 404 (a real database and no ADMIN_TOKEN). */
  readonly adminToken: Redacted.Redacted<string> | null
  readonly cursorSecret: Redacted.Redacted<string>
  readonly webhookSecretKey: Redacted.Redacted<string>
  /** True when the admin token was generated here (embedded mode prints it). */
  readonly adminTokenGenerated: boolean
}

interface StoredSecrets {
  admin_token?: string
  cursor_secret?: string
  webhook_secret_key?: string
}

const randomSecret = (bytes: number) => randomBytes(bytes).toString("base64url")

export const loadServerSecrets = Effect.gen(function*() {
  const config = yield* ServerConfig
  const fromEnv = yield* Config.all({
    adminToken: Config.option(Config.redacted("ADMIN_TOKEN")),
    cursorSecret: Config.option(Config.redacted("CURSOR_SECRET")),
    webhookSecretKey: Config.option(Config.redacted("WEBHOOK_SECRET_KEY"))
  })
  const embedded = Option.isNone(config.databaseUrl)
  const file = join(config.dataDir, "secrets.json")
  const stored: StoredSecrets = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as StoredSecrets) : {}
  const next: StoredSecrets = { ...stored }
  const pick = (value: Option.Option<Redacted.Redacted<string>>, key: keyof StoredSecrets, generate: boolean) =>
    Option.match(Option.filter(value, (secret) => Redacted.value(secret) !== ""), {
      onSome: (secret) => secret,
      onNone: () => {
        if (next[key] === undefined && generate) next[key] = randomSecret(32)
        return next[key] === undefined ? null : Redacted.make(next[key])
      }
    })
  const adminToken = pick(fromEnv.adminToken, "admin_token", embedded)
  const cursorSecret = pick(fromEnv.cursorSecret, "cursor_secret", true)!
  const webhookSecretKey = pick(fromEnv.webhookSecretKey, "webhook_secret_key", true)!
  if (JSON.stringify(next) !== JSON.stringify(stored)) {
    mkdirSync(config.dataDir, { recursive: true })
    writeFileSync(file, JSON.stringify(next, null, 2), { mode: 0o600 })
  }
  return {
    adminToken,
    cursorSecret,
    webhookSecretKey,
    adminTokenGenerated: Option.isNone(fromEnv.adminToken) && adminToken !== null
  } satisfies ServerSecrets
})

export class Secrets extends Context.Tag("hookline/Secrets")<Secrets, ServerSecrets>() {
  static readonly Live = Layer.effect(Secrets, loadServerSecrets)
}
