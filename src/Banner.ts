/**
 * What the person who just started a server needs to know: where it listens, where its data
 * live and how to reach the admin API, whatever the settings (SEED_DEMO=false included).
 *
 * Embedded mode (a laptop) prints a banner to the terminal: it carries the generated admin token
 * and the demo key, so it is written to stdout on purpose and never logged. With a real database
 * (a deployment) it is one structured log line that holds no secret.
 */
import { Effect, Option, Redacted } from "effect"
import { databaseLabel, publicBaseUrl, Secrets, ServerConfig } from "./Config.js"
import type { DemoFile } from "./Demo.js"

export const announceStart = (demo: DemoFile | null) =>
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const secrets = yield* Secrets
    const base = publicBaseUrl(config)
    if (Option.isSome(config.databaseUrl)) {
      return yield* Effect.logInfo("Hookline is running").pipe(
        Effect.annotateLogs({
          url: base,
          database: databaseLabel(Redacted.value(config.databaseUrl.value)),
          admin_api: secrets.adminToken === null ? "off (ADMIN_TOKEN is unset)" : `${base}/admin with Authorization: Bearer <ADMIN_TOKEN>`,
          docs: `${base}/docs`
        })
      )
    }
    const adminToken = secrets.adminToken === null
      ? "(none)"
      : secrets.adminTokenGenerated
      ? Redacted.value(secrets.adminToken)
      : "the ADMIN_TOKEN you set"
    const tryIt = demo === null
      ? [
        "No demo account (SEED_DEMO=false). Create an account and a key:",
        "  npm run admin -- accounts create --plan pro --name Me",
        "  npm run admin -- keys create acct_…",
        "or over HTTP:",
        `  curl -s -X POST -H "Authorization: Bearer ${adminToken}" -H 'content-type: application/json' -d '{"plan":"pro"}' ${base}/admin/accounts`
      ]
      : [
        "Try it:",
        `  curl -s -H "Authorization: Bearer ${demo.api_key}" ${base}/v1/wallet`,
        `  curl -s -H "Authorization: Bearer ${demo.api_key}" "${base}/v1/hooks/search?q=money"`
      ]
    yield* Effect.sync(() =>
      process.stdout.write(
        [
          "",
          `Hookline is running on ${base} (embedded database in ${config.dataDir})`,
          ...(demo === null ? [] : [`  demo account:  ${demo.account_id}`, `  demo API key:  ${demo.api_key}`]),
          `  admin token:   ${adminToken}`,
          `  admin API:     ${base}/admin/… with "Authorization: Bearer <admin token>", or npm run admin -- --help`,
          `  API reference: ${base}/docs`,
          "",
          ...tryIt,
          ""
        ].join("\n") + "\n"
      )
    )
  })
