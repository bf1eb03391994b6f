/**
 * What a benchmark runs against: a dedicated database on the local Postgres, the real Hookline
 * server (`bun src/main.ts`, its own process) and the bare baseline server (bench/support/
 * baseline.ts, its own process), both on loopback, both with a pool of PG_MAX_CONNECTIONS (10).
 */
import type { Subprocess } from "bun"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import Pg from "pg"

export const repositoryRoot = resolve(import.meta.dir, "../..")

/** The Postgres server the benchmark uses (its `postgres` database is used to create others). */
export const adminDatabaseUrl = process.env.BENCH_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

/**
 * How every server and admin CLI the bench starts runs its allocator: as `npm start`, `npm run
 * admin` and the Docker image run Hookline (freed memory stays with the process; README
 * "Configuration", `MIMALLOC_PURGE_DELAY`), so the sides compare like for like.
 * `MIMALLOC_PURGE_DELAY=100 npm run bench` measures Bun's default.
 */
export const allocatorEnv = { MIMALLOC_PURGE_DELAY: process.env.MIMALLOC_PURGE_DELAY ?? "-1" }

/** Pool size of both servers, so the comparison is like for like. */
export const poolSize = Number(process.env.BENCH_PG_MAX_CONNECTIONS ?? 10)

/** Drops and creates the database `name` (default hookline_bench); returns its URL. */
export const freshDatabase = async (name = "hookline_bench"): Promise<string> => {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad database name ${name}`)
  const admin = new Pg.Client({ connectionString: adminDatabaseUrl })
  await admin.connect()
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  const url = new URL(adminDatabaseUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** A TCP port free on loopback right now. */
export const freePort = (): number => {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() })
  const port = probe.port
  probe.stop(true)
  if (port === undefined) throw new Error("no free port")
  return port
}

const waitUntilReady = async (url: string, child: Subprocess, what: string, logs: () => string) => {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}:\n${logs()}`)
    try {
      const response = await fetch(url)
      if (response.status === 200) return
    } catch {
      // not listening yet
    }
    await Bun.sleep(100)
  }
  throw new Error(`${what} was not ready within 60 s:\n${logs()}`)
}

/** Keeps the last part of a child's output, to explain a failed start. */
const tail = (stream: ReadableStream<Uint8Array> | null | undefined) => {
  let text = ""
  if (stream !== null && stream !== undefined) {
    void (async () => {
      const decoder = new TextDecoder()
      const reader = stream.getReader()
      for (;;) {
        const { done, value } = await reader.read()
        if (done) return
        text = (text + decoder.decode(value)).slice(-8_000)
      }
    })()
  }
  return () => text
}

export interface ServerProcess {
  readonly url: string
  /** The server's own process (Bun), for CPU accounting. */
  readonly pid: number
  readonly stop: () => Promise<void>
}

export interface HooklineServer extends ServerProcess {
  readonly databaseUrl: string
  readonly adminToken: string
  /** An admin API call; throws unless it answers 200. */
  readonly admin: <T>(method: string, path: string, body?: unknown) => Promise<T>
}

const stopChild = async (child: Subprocess) => {
  if (child.exitCode !== null) return
  child.kill("SIGTERM")
  const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(10_000).then(() => false)])
  if (!exited) child.kill("SIGKILL")
}

/**
 * Starts the real server on `databaseUrl` with the benchmark's settings (no rate limits, no
 * demo data, warnings only) plus `env`, and waits for /readyz.
 */
export const startHookline = async (
  databaseUrl: string,
  env: Record<string, string> = {},
  /** The server's entry module, relative to the repository (a bench may wrap the app, e.g. swap the scorer). */
  entry = "src/main.ts"
): Promise<HooklineServer> => {
  const port = freePort()
  const url = `http://127.0.0.1:${port}`
  const adminToken = `bench_admin_${randomBytes(16).toString("hex")}`
  const dataDir = mkdtempSync(join(tmpdir(), "hookline-bench-"))
  // BENCH_BUN_ARGS: flags for the server's Bun, e.g. "--cpu-prof-md --cpu-prof-dir=/tmp/prof".
  const bunArgs = (process.env.BENCH_BUN_ARGS ?? "").split(" ").filter((arg) => arg !== "")
  const child = Bun.spawn([process.execPath, ...bunArgs, entry], {
    cwd: repositoryRoot,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? tmpdir(),
      ...allocatorEnv,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      HOST: "127.0.0.1",
      PUBLIC_BASE_URL: url,
      DATA_DIR: dataDir,
      ADMIN_TOKEN: adminToken,
      PG_MAX_CONNECTIONS: String(poolSize),
      LOG_LEVEL: "warning",
      LOG_FORMAT: "logfmt",
      RATE_LIMIT_ENABLED: "false",
      SEED_DEMO: "false",
      ...env
    },
    stdout: "pipe",
    stderr: "pipe"
  })
  const out = tail(child.stdout)
  const err = tail(child.stderr)
  const logs = () => `${out()}\n${err()}`
  await waitUntilReady(`${url}/readyz`, child, "the Hookline server", logs)

  const admin = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const response = await fetch(`${url}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    const text = await response.text()
    if (response.status !== 200) throw new Error(`admin ${method} ${path}: ${response.status} ${text}`)
    return JSON.parse(text) as T
  }

  return {
    url,
    pid: child.pid,
    databaseUrl,
    adminToken,
    admin,
    stop: async () => {
      await stopChild(child)
      rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

export interface BenchAccount {
  readonly accountId: string
  readonly keyId: string
  readonly key: string
}

/**
 * `count` enterprise accounts, each with one key of all scopes and a large top-up balance, so no
 * scenario runs out of credits. Created through the admin API, as a billing system would.
 */
export const createAccounts = async (server: HooklineServer, count: number, topup = 50_000_000): Promise<Array<BenchAccount>> => {
  const accounts: Array<BenchAccount> = []
  for (let i = 0; i < count; i++) {
    const account = await server.admin<{ id: string }>("POST", "/accounts", {
      name: `bench ${i}`,
      plan: "enterprise",
      topup_balance: topup
    })
    const key = await server.admin<{ id: string; api_key: string }>("POST", `/accounts/${account.id}/keys`, {})
    accounts.push({ accountId: account.id, keyId: key.id, key: key.api_key })
  }
  return accounts
}

/**
 * Starts the bare baseline server (Bun.serve + pg, no framework) on `databaseUrl`. Extra route
 * modules (see baseline.ts) add the SQL of other scenarios.
 */
export const startBaseline = async (
  databaseUrl: string,
  routeModules: ReadonlyArray<string> = [],
  env: Record<string, string> = {}
): Promise<ServerProcess> => {
  const port = freePort()
  const url = `http://127.0.0.1:${port}`
  const child = Bun.spawn([process.execPath, join(repositoryRoot, "bench/support/baseline.ts")], {
    cwd: repositoryRoot,
    env: {
      PATH: process.env.PATH ?? "",
      ...allocatorEnv,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      PG_MAX_CONNECTIONS: String(poolSize),
      BASELINE_ROUTES: routeModules.map((module) => resolve(repositoryRoot, module)).join(","),
      ...env
    },
    stdout: "pipe",
    stderr: "pipe"
  })
  const out = tail(child.stdout)
  const err = tail(child.stderr)
  await waitUntilReady(`${url}/healthz`, child, "the baseline server", () => `${out()}\n${err()}`)
  return { url, pid: child.pid, stop: () => stopChild(child) }
}

/**
 * Starts the framework-floor server (bench/support/floor.ts): `framework` is a minimal HttpApi
 * on the same stack, `bare` a bare Bun.serve; both accept `keys` as bearer tokens.
 */
export const startFloor = async (mode: "framework" | "bare", keys: ReadonlyArray<string>): Promise<ServerProcess> => {
  const port = freePort()
  const url = `http://127.0.0.1:${port}`
  const child = Bun.spawn([process.execPath, join(repositoryRoot, "bench/support/floor.ts"), mode], {
    cwd: repositoryRoot,
    env: { PATH: process.env.PATH ?? "", ...allocatorEnv, PORT: String(port), KEYS: keys.join(",") },
    stdout: "pipe",
    stderr: "pipe"
  })
  const out = tail(child.stdout)
  const err = tail(child.stderr)
  const ready = `${url}/v1/wallet`
  // Ready once it answers at all (401 without a key).
  const deadline = Date.now() + 30_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the ${mode} floor server exited with ${child.exitCode}:\n${out()}\n${err()}`)
    if (Date.now() > deadline) throw new Error(`the ${mode} floor server was not ready within 30 s:\n${out()}\n${err()}`)
    const answered = await fetch(ready).then(() => true, () => false)
    if (answered) break
    await Bun.sleep(100)
  }
  return { url, pid: child.pid, stop: () => stopChild(child) }
}
