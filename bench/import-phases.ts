/**
 * Where an import request's database time goes: on the catalog that `bun bench/import.ts` left in
 * its database, one request's worth of demo hooks (35,000, new ids or a re-import) is staged with
 * with one unnest of typed arrays per batch (as the import does), upserted with the search triggers off, then given its
 * search maintenance (the triggers' function); each phase's CPU is read from the backend's /proc
 * entry. Everything runs in a transaction that is rolled back.
 *
 *   bun bench/import-phases.ts [--database hookline_bench_import] [--count 35000]
 */
import { readFileSync } from "node:fs"
import { parseArgs } from "node:util"
import Pg from "pg"
import { createImportStagingSql, hookColumns, hookColumnTypes, stageHooksSql, upsertStagedHooksSql } from "../src/Hooks/CatalogSql.js"
import { demoHook } from "../src/Hooks/DemoData.js"

const { values } = parseArgs({ args: process.argv.slice(2), options: { database: { type: "string" }, count: { type: "string" } } })
const count = Number(values.count ?? 35_000)
const client = new Pg.Client({ connectionString: `postgres://postgres@127.0.0.1:5432/${values.database ?? "hookline_bench_import"}` })
await client.connect()
const { rows: [{ pid, hooks }] } = await client.query<{ pid: number; hooks: number }>(
  "SELECT pg_backend_pid() AS pid, (SELECT hooks FROM catalog_state)::int AS hooks"
)
const backendCpu = () =>
  readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ").slice(11, 13).reduce((sum, ticks) => sum + Number(ticks), 0) / 100

const timed = async (label: string, run: () => Promise<unknown>) => {
  const cpu = backendCpu()
  const wall = performance.now()
  await run()
  const seconds = backendCpu() - cpu
  console.log(`| ${label} | ${seconds.toFixed(2)} s | ${Math.round((seconds / count) * 1e6)} | ${Math.round(performance.now() - wall)} ms |`)
}

/** The batch as one array per column, as text (pg sends arrays as text; the statement casts each). */
const columnArrays = (batch: ReadonlyArray<ReturnType<typeof demoHook>>) =>
  hookColumns.map((column, i) =>
    batch.map((record) => {
      const value: unknown = record[column]
      if (value === null || value === undefined) return null
      return hookColumnTypes[i] === "jsonb" ? JSON.stringify(value) : value
    })
  )

const batches = <A>(items: ReadonlyArray<A>, size: number) =>
  Array.from({ length: Math.ceil(items.length / size) }, (_, i) => [i * size, items.slice(i * size, (i + 1) * size)] as const)

console.log(`catalog of ${hooks.toLocaleString("en-US")} hooks, requests of ${count.toLocaleString("en-US")}\n`)
for (const [label, from] of [["new ids", hooks], ["re-import", Math.floor(hooks / 2)]] as const) {
  const records = Array.from({ length: count }, (_, i) => demoHook(from + i))
  console.log(`${label}:\n\n| phase | backend CPU | µs a hook | wall |\n|---|---:|---:|---:|`)
  await client.query("BEGIN")
  await client.query(createImportStagingSql)
  await timed("staging, unnest of typed arrays", async () => {
    for (const [seq, batch] of batches(records, 5_000)) await client.query(stageHooksSql, [...columnArrays(batch), seq])
  })
  await client.query("ALTER TABLE hooks DISABLE TRIGGER hooks_search_insert, DISABLE TRIGGER hooks_search_update")
  await timed("upsert into hooks (triggers off)", () => client.query(upsertStagedHooksSql))
  const ids = records.map((record) => record.id)
  await timed("search maintenance (hook_search_upsert_from)", () => client.query("SELECT hook_search_upsert_from($1::text[])", [ids]))
  await timed("… to_tsvector and trigrams alone", () =>
    client.query("SELECT count(to_tsvector('english', t)), count(show_trgm(lower(t))) FROM unnest($1::text[]) t", [records.map((r) => r.text)]))
  await client.query("ROLLBACK")
  console.log()
}
await client.end()
