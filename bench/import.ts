/**
 * Bulk import at scale: the deterministic demo catalog (src/Hooks/DemoData.ts) written once as
 * an NDJSON file, then imported into a fresh, migrated database with the admin CLI
 * (`npm run admin -- catalog import FILE`) in its own process, as an operator would. Prints the
 * wall time and hooks/s and checks that every hook landed once.
 *
 *   bun bench/import.ts [--count 1000000] [--file /tmp/hookline-demo-1000000.ndjson] [-- extra CLI args]
 *
 * Standalone on purpose (not a row of bench/run.ts): it needs a ~900 MB file and a few minutes.
 */
import { createWriteStream, existsSync, readFileSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { parseArgs } from "node:util"
import Pg from "pg"
import { demoHook } from "../src/Hooks/DemoData.js"
import { allocatorEnv, freshDatabase } from "./support/processes.js"

const { values, positionals } = parseArgs({
  args: process.argv.slice(2),
  allowPositionals: true,
  options: { count: { type: "string" }, file: { type: "string" }, database: { type: "string" }, root: { type: "string" } }
})
const count = Number(values.count ?? 1_000_000)
const file = values.file ?? join(tmpdir(), `hookline-demo-${count}.ndjson`)
const databaseName = values.database ?? "hookline_bench_import"
const adminUrl = process.env.BENCH_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
/** The checkout whose CLI runs (--root: an older one, to measure before a change). */
const root = resolve(values.root ?? resolve(import.meta.dir, ".."))

/** Writes demo hooks 0 … count-1, one JSON object per line (kept for the next run). */
const writeDemoFile = async () => {
  if (existsSync(file)) return
  const partial = `${file}.partial`
  const out = createWriteStream(partial)
  for (let from = 0; from < count; from += 1_000) {
    let text = ""
    for (let index = from; index < Math.min(count, from + 1_000); index++) text += JSON.stringify(demoHook(index)) + "\n"
    if (!out.write(text)) await new Promise((resolveDrain) => out.once("drain", resolveDrain))
  }
  await new Promise<void>((resolveEnd, reject) => out.end((error?: Error | null) => (error ? reject(error) : resolveEnd())))
  await Bun.write(file, Bun.file(partial))
  ;(await import("node:fs")).rmSync(partial)
}

const clockTicks = 100 // USER_HZ on Linux

/** CPU seconds (user + system) a process has used so far, or null once it is gone. */
const cpuSecondsOf = (pid: number): number | null => {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")
    return (Number(fields[11]) + Number(fields[12])) / clockTicks
  } catch {
    return null
  }
}

/**
 * CPU used by PostgreSQL's backends serving the import database, sampled every 200 ms (wall
 * time alone says little on a machine shared with other work). Backends that live shorter than
 * a sample are missed, which only undercounts.
 */
const databaseCpu = (monitor: Pg.Client) => {
  const seen = new Map<number, number>()
  let stopped = false
  const loop = (async () => {
    while (!stopped) {
      const { rows } = await monitor.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = $1", [databaseName])
      for (const { pid } of rows) {
        const seconds = cpuSecondsOf(pid)
        if (seconds !== null) seen.set(pid, seconds)
      }
      await Bun.sleep(200)
    }
  })()
  return async () => {
    stopped = true
    await loop
    return [...seen.values()].reduce((sum, seconds) => sum + seconds, 0)
  }
}

const cli = (url: string, args: ReadonlyArray<string>) =>
  Bun.spawn([process.execPath, "src/Admin/Cli.ts", ...args], {
    cwd: root,
    env: { ...process.env, ...allocatorEnv, DATABASE_URL: url, LOG_LEVEL: "warning" },
    stdout: "pipe",
    stderr: "inherit"
  })

await writeDemoFile()
const url = await freshDatabase(databaseName)
const migrate = cli(url, ["migrate"])
if ((await migrate.exited) !== 0) throw new Error("migrate failed")

const bytes = statSync(file).size
process.stderr.write(`importing ${count.toLocaleString("en-US")} hooks (${(bytes / 1048576).toFixed(0)} MiB) from ${file}\n`)
const monitor = new Pg.Client({ connectionString: adminUrl })
await monitor.connect()
const stopCpu = databaseCpu(monitor)
const started = performance.now()
const run = cli(url, ["catalog", "import", file, ...positionals])
const output = await new Response(run.stdout).text()
const exitCode = await run.exited
const seconds = (performance.now() - started) / 1000
const cliCpu = run.resourceUsage()
const postgresCpu = await stopCpu()
await monitor.end()

const db = new Pg.Client({ connectionString: url })
await db.connect()
const { rows } = await db.query<{ hooks: number; searchable: number; counted: number }>(
  `SELECT (SELECT count(*) FROM hooks)::int AS hooks, (SELECT count(*) FROM hook_search)::int AS searchable,
          (SELECT hooks FROM catalog_state)::int AS counted`
)
await db.end()
console.log(output.trim())
console.log(JSON.stringify({
  count,
  mib: Math.round(bytes / 1048576),
  exit_code: exitCode,
  wall_seconds: Math.round(seconds * 10) / 10,
  hooks_per_second: Math.round(rows[0].hooks / seconds),
  cli_cpu_seconds: cliCpu === undefined ? null : Math.round(Number(cliCpu.cpuTime.total) / 1e5) / 10,
  postgres_cpu_seconds: Math.round(postgresCpu * 10) / 10,
  load_average: readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" "),
  ...rows[0]
}))
