/**
 * First start in embedded mode: a demo account (plan pro, 1,000 monthly credits), a key with
 * every scope and a demo catalog. The key is kept in DATA_DIR/demo.json (mode 0600, local
 * development only) so every start can print it in the banner (Banner.ts).
 */
import { Effect } from "effect"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Accounts } from "./Admin/Accounts.js"
import { Auth } from "./Auth/Auth.js"
import { ServerConfig } from "./Config.js"
import { seedDemoCatalog } from "./Hooks/DemoCatalog.js"

export interface DemoFile {
  readonly account_id: string
  readonly api_key: string
}

export const ensureDemo = Effect.gen(function*() {
  const config = yield* ServerConfig
  const file = join(config.dataDir, "demo.json")
  let demo: DemoFile
  if (existsSync(file)) {
    demo = JSON.parse(readFileSync(file, "utf8")) as DemoFile
  } else {
    const accounts = yield* Accounts
    const auth = yield* Auth
    const account = yield* accounts.create({ name: "Demo", plan: "pro" })
    const key = yield* auth.createKey(account.id, undefined)
    yield* seedDemoCatalog(config.demoCatalogSize)
    demo = { account_id: account.id, api_key: key.api_key }
    writeFileSync(file, JSON.stringify(demo, null, 2), { mode: 0o600 })
  }
  return demo
})
