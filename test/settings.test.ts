/**
 * Count settings (processes, deliveries, page queries and pipelined statements at once): the
 * default when unset, the value when valid, and a boot that fails naming the variable when it is
 * below 1 or not a number.
 */
import { describe, expect, test } from "bun:test"
import { Config, ConfigProvider, Effect, Result } from "effect"
import { ProcessesConfig, ServerConfig } from "../src/Config.js"
import { CatalogConfig } from "../src/Hooks/Config.js"
import { WebhookConfig } from "../src/Webhooks/Config.js"

const read = <A>(config: Config.Config<A>, env: Record<string, string>) =>
  Effect.runSync(Effect.result(config.parse(ConfigProvider.fromUnknown(env))))

describe.each([
  ["SEARCH_CONCURRENCY", 6, (env: Record<string, string>) => Result.map(read(CatalogConfig, env), (config) => config.searchConcurrency)],
  ["WEBHOOK_DISPATCH_CONCURRENCY", 16, (env: Record<string, string>) => Result.map(read(WebhookConfig, env), (config) => config.concurrency)],
  ["WEB_CONCURRENCY", 1, (env: Record<string, string>) => Result.map(read(ProcessesConfig, env), (config) => config.processes)],
  ["DB_PIPELINE_DEPTH", 32, (env: Record<string, string>) => Result.map(read(ServerConfig, env), (config) => config.dbPipelineDepth)]
] as const)("%s", (name, fallback, value) => {
  test("unset: the documented default; set: its value", () => {
    expect(value({})).toEqual(Result.succeed(fallback))
    expect(value({ [name]: "7" })).toEqual(Result.succeed(7))
  })

  test.each(["0", "-2", "many"])("%p is refused, naming the variable", (setting) => {
    const outcome = value({ [name]: setting })
    expect(Result.isFailure(outcome)).toBe(true)
    if (Result.isFailure(outcome)) expect(String(outcome.failure)).toContain(name)
  })
})
