/**
 * A PostgreSQL and a Redis of a test's own, on free ports in a temporary directory, that the test
 * may stop hard and start again (the outage tests, `npm run chaos`) without disturbing the shared
 * servers on 5432 and 6379. PostgreSQL comes from the newest /usr/lib/postgresql/<version>/bin
 * (or PG_BIN); initdb refuses to run as root, so as root the cluster belongs to the `postgres`
 * user and its commands run through `runuser`.
 */
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./process.js"

const postgresBin = (): string => {
  if (process.env.PG_BIN !== undefined) return process.env.PG_BIN
  const root = "/usr/lib/postgresql"
  const versions = existsSync(root) ? readdirSync(root).filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(b) - Number(a)) : []
  const found = versions.map((version) => join(root, version, "bin")).find((bin) => existsSync(join(bin, "initdb")))
  if (found === undefined) throw new Error("no PostgreSQL binaries in /usr/lib/postgresql/*/bin (set PG_BIN)")
  return found
}

const asRoot = process.getuid?.() === 0

/** `command` as the cluster's owner: the postgres user when running as root. */
const asOwner = (command: ReadonlyArray<string>): Array<string> => asRoot ? ["runuser", "-u", "postgres", "--", ...command] : [...command]

const run = async (command: ReadonlyArray<string>) => {
  const child = Bun.spawn([...command], { stdin: "ignore", stdout: "pipe", stderr: "pipe" })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`${command.join(" ")} exited ${code}: ${stdout}${stderr}`)
}

export interface OwnPostgres {
  readonly port: number
  /** The URL of the `postgres` database (user postgres, trust). */
  readonly url: string
  /** Stops the server at once, as a crash would (`pg_ctl stop -m immediate`). */
  readonly stopHard: () => Promise<void>
  /** Starts it again on the same port and data; resolves once it accepts connections. */
  readonly start: () => Promise<void>
  readonly destroy: () => Promise<void>
}

export const startOwnPostgres = async (): Promise<OwnPostgres> => {
  const bin = postgresBin()
  const dir = mkdtempSync(join(tmpdir(), "hookline-pg-"))
  const data = join(dir, "data")
  if (asRoot) {
    const { uid, gid } = await postgresIds()
    chownSync(dir, uid, gid)
  }
  const port = freePort()
  await run(asOwner([join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]))
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`
  const start = () => run(asOwner([join(bin, "pg_ctl"), "-D", data, "-l", join(dir, "log"), "-o", options, "-w", "-t", "30", "start"]))
  const stop = (mode: "immediate" | "fast") => run(asOwner([join(bin, "pg_ctl"), "-D", data, "-m", mode, "-w", "stop"]))
  await start()
  let running = true
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stopHard: async () => {
      await stop("immediate")
      running = false
    },
    start: async () => {
      await start()
      running = true
    },
    destroy: async () => {
      if (running) await stop("immediate").catch(() => {})
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

const postgresIds = async () => {
  const id = async (flag: string) => Number((await new Response(Bun.spawn(["id", flag, "postgres"], { stdout: "pipe" }).stdout).text()).trim())
  return { uid: await id("-u"), gid: await id("-g") }
}

export interface OwnRedis {
  readonly url: string
  /** Kills the server (SIGKILL): connections refused until `start`. */
  readonly kill: () => Promise<void>
  /** Freezes the server (SIGSTOP): connections accepted, nothing answered, until `resume`. */
  readonly freeze: () => void
  readonly resume: () => void
  readonly start: () => Promise<void>
  readonly destroy: () => Promise<void>
}

export const startOwnRedis = async (): Promise<OwnRedis> => {
  const port = freePort()
  let child: ReturnType<typeof Bun.spawn> | null = null
  const start = async () => {
    child = Bun.spawn(["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
      stdin: "ignore",
      stdout: "ignore",
      stderr: "ignore"
    })
    const deadline = Date.now() + 10_000
    while (Date.now() < deadline) {
      const ping = Bun.spawn(["redis-cli", "-p", String(port), "ping"], { stdout: "pipe", stderr: "ignore" })
      if ((await new Response(ping.stdout).text()).trim() === "PONG") return
      await Bun.sleep(50)
    }
    throw new Error(`redis-server on ${port} did not answer within 10 s`)
  }
  const kill = async () => {
    const running = child
    child = null
    if (running === null) return
    running.kill("SIGKILL")
    await running.exited
  }
  await start()
  return {
    url: `redis://127.0.0.1:${port}`,
    kill,
    freeze: () => child?.kill("SIGSTOP"),
    resume: () => child?.kill("SIGCONT"),
    start,
    destroy: async () => {
      child?.kill("SIGCONT")
      await kill()
    }
  }
}
