/**
 * Hookline as a real operating-system process (`bun src/main.ts`) on a given database, for the
 * tests that need signals: graceful shutdown (SIGTERM), crashes (SIGKILL), several processes on
 * one database. Output is collected continuously (a full pipe would stall the server).
 *
 * A gated ffprobe (`gatedProbe`) lets a test hold prediction jobs in `running` for as long as it
 * likes: the scorer's ffprobe waits until the gate file exists, then runs the real one.
 */
import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { tempDir } from "./tempDirs.js"
import { ffmpegPath, ffprobePath } from "./clips.js"
import type { AccountBody, ApiKeyBody, Response as TestResponse, UploadLink } from "./server.js"

const root = join(import.meta.dir, "..", "..")

export const freePort = () => {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() })
  const port = probe.port ?? 0
  probe.stop(true)
  return port
}

export interface ServerProcess {
  readonly url: string
  readonly port: number
  readonly pid: number
  readonly child: ReturnType<typeof Bun.spawn>
  /** Everything the process wrote to stdout and stderr so far. */
  readonly output: () => string
  readonly exited: Promise<number>
  readonly request: <T = unknown>(path: string, options?: {
    readonly method?: string
    readonly key?: string
    readonly body?: unknown
    readonly rawBody?: BodyInit
    readonly headers?: Record<string, string>
    /** false: a connection of its own, neither taken from nor left in the pool (Bun's fetch `keepalive`). */
    readonly keepAlive?: boolean
  }) => Promise<TestResponse<T>>
  readonly kill: (signal: "SIGTERM" | "SIGINT" | "SIGKILL") => void
}

/** Inherited environment minus anything that would point the child elsewhere. */
export const baseEnvironment = () => {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined) continue
    if (["DATABASE_URL", "ADMIN_TOKEN", "PORT", "HOST", "PUBLIC_BASE_URL", "DATA_DIR", "REDIS_URL"].includes(name)) continue
    if (name.startsWith("OTEL_")) continue
    env[name] = value
  }
  return env
}

/**
 * What every process of one deployment shares: the database, the blob directory and the secrets
 * (set explicitly, as production does, so processes started together agree).
 */
export interface Deployment {
  readonly databaseUrl: string
  readonly adminToken: string
  readonly dataDir: string
  readonly cursorSecret: string
  readonly webhookSecretKey: string
}

export const deployment = (databaseUrl: string): Deployment => ({
  databaseUrl,
  adminToken: `admin_${randomBytes(16).toString("hex")}`,
  dataDir: tempDir("hookline-proc-"),
  cursorSecret: randomBytes(32).toString("base64url"),
  webhookSecretKey: randomBytes(32).toString("base64url")
})

/** The environment of `bun src/main.ts` in embedded mode: no DATABASE_URL, PGlite in `dataDir`. */
export const embeddedEnvironment = (dataDir: string, port: number, demoCatalogSize: number): Record<string, string> => ({
  ...baseEnvironment(),
  DATA_DIR: dataDir,
  PORT: String(port),
  DEMO_CATALOG_SIZE: String(demoCatalogSize),
  LOG_LEVEL: "Warning"
})

/**
 * Starts `bun src/main.ts` (or `command`, e.g. `npm start`) with `env` and waits for its start-up
 * banner, which ends with ready-to-paste curl lines; returns the process, what it printed and how
 * long that took.
 */
export const startUntilBanner = async (
  env: Record<string, string>,
  command: ReadonlyArray<string> = [process.execPath, "src/main.ts"],
  cwd = root
) => {
  const child = Bun.spawn([...command], { cwd, env, stdout: "pipe", stderr: "pipe" })
  const started = Date.now()
  const reader = child.stdout.getReader()
  let output = ""
  while (!output.includes("curl -s")) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`server exited: ${output}${await new Response(child.stderr).text()}`)
    output += new TextDecoder().decode(value)
  }
  reader.releaseLock()
  return { child, output, startupMs: Date.now() - started }
}

/** Starts `bun src/main.ts` and resolves once /healthz answers 200. */
export const spawnServer = async (options: {
  readonly deployment: Deployment
  readonly env?: Record<string, string>
  readonly port?: number
}): Promise<ServerProcess> => {
  const shared = options.deployment
  const port = options.port ?? freePort()
  return spawnMain(port, {
    ...baseEnvironment(),
    LOG_LEVEL: "Warning",
    SEED_DEMO: "false",
    RATE_LIMIT_ENABLED: "false",
    ...options.env,
    DATABASE_URL: shared.databaseUrl,
    ADMIN_TOKEN: shared.adminToken,
    DATA_DIR: shared.dataDir,
    CURSOR_SECRET: shared.cursorSecret,
    WEBHOOK_SECRET_KEY: shared.webhookSecretKey,
    PORT: String(port),
    HOST: "127.0.0.1",
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`
  }, "/healthz")
}

/**
 * Starts `bun src/main.ts` in embedded mode (no DATABASE_URL, PGlite in `dataDir`) and resolves
 * once it has printed its banner and /readyz answers 200 (the demo account and catalog are in).
 * Its output is kept: a test prints `output()` when it fails.
 */
export const spawnEmbeddedServer = async (options: {
  readonly dataDir: string
  readonly demoCatalogSize: number
  readonly env?: Record<string, string>
}): Promise<ServerProcess & { readonly adminToken: string; readonly demoKey: string }> => {
  const port = freePort()
  const server = await spawnMain(port, {
    ...embeddedEnvironment(options.dataDir, port, options.demoCatalogSize),
    HOST: "127.0.0.1",
    ...options.env
  }, "/readyz", (output) => output.includes("curl -s"))
  const adminToken = /admin token:\s+(\S+)/.exec(server.output())?.[1]
  const demoKey = /demo API key:\s+(hkl_live_\S+)/.exec(server.output())?.[1]
  if (adminToken === undefined || demoKey === undefined) throw new Error(`no banner in the output:\n${server.output()}`)
  return { ...server, adminToken, demoKey }
}

/** Runs `use` against an embedded server, printing the server's output if it fails; the server is stopped after. */
export const usingEmbeddedServer = async <A>(
  options: Parameters<typeof spawnEmbeddedServer>[0],
  use: (server: Awaited<ReturnType<typeof spawnEmbeddedServer>>) => Promise<A>
): Promise<A> => {
  const server = await spawnEmbeddedServer(options)
  try {
    return await use(server)
  } catch (error) {
    console.log(`server output:\n${server.output()}`)
    throw error
  } finally {
    server.kill("SIGTERM")
    await server.exited
  }
}

/** Spawns `bun src/main.ts` with `env`; resolves once `readyPath` answers 200 and `printed` holds for its output. */
const spawnMain = async (
  port: number,
  env: Record<string, string>,
  readyPath: string,
  printed: (output: string) => boolean = () => true
): Promise<ServerProcess> => {
  const url = `http://127.0.0.1:${port}`
  // Its own temporary directory, removed with the test's: what a killed server leaves there goes too.
  const child = Bun.spawn([process.execPath, "src/main.ts"], {
    cwd: root,
    env: { TMPDIR: tempDir("hookline-proc-tmp-"), ...env },
    stdout: "pipe",
    stderr: "pipe"
  })
  let output = ""
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder()
    const reader = stream.getReader()
    for (;;) {
      const { value, done } = await reader.read()
      if (done) return
      output += decoder.decode(value, { stream: true })
    }
  }
  const collected = Promise.all([collect(child.stdout), collect(child.stderr)])
  const exited = child.exited.then(async (code) => {
    await collected
    return code
  })

  const request: ServerProcess["request"] = async (path, requestOptions = {}) => {
    const headers: Record<string, string> = { ...requestOptions.headers }
    if (requestOptions.key !== undefined) headers["authorization"] = `Bearer ${requestOptions.key}`
    let body = requestOptions.rawBody
    if (requestOptions.body !== undefined) {
      body = JSON.stringify(requestOptions.body)
      headers["content-type"] ??= "application/json"
    }
    const response = await fetch(url + path, { method: requestOptions.method ?? "GET", headers, body, keepalive: requestOptions.keepAlive ?? true })
    const text = await response.text()
    let parsed: unknown = text
    try {
      parsed = text === "" ? null : JSON.parse(text)
    } catch {
      // not JSON: keep the text
    }
    return { status: response.status, headers: response.headers, body: parsed as never }
  }

  let gone = false
  void exited.then(() => {
    gone = true
  })
  for (;;) {
    if (gone) throw new Error(`server exited during start-up (code ${child.exitCode}):\n${output}`)
    const ready = printed(output) && await fetch(url + readyPath).then((r) => r.status === 200, () => false)
    if (ready) break
    await Bun.sleep(50)
  }

  return {
    url,
    port,
    pid: child.pid,
    child,
    output: () => output,
    exited,
    request,
    kill: (signal) => child.kill(signal)
  }
}

/** Admin helpers over HTTP against any server of the database. */
export const adminClient = (server: Pick<ServerProcess, "request">, adminToken: string) => ({
  account: async (fields: Record<string, unknown> = {}) => {
    const created = await server.request<AccountBody>("/admin/accounts", {
      method: "POST",
      key: adminToken,
      body: { plan: "pro", ...fields }
    })
    if (created.status !== 200) throw new Error(`account: ${created.status} ${JSON.stringify(created.body)}`)
    const key = await server.request<ApiKeyBody>(`/admin/accounts/${created.body.id}/keys`, {
      method: "POST",
      key: adminToken,
      body: {}
    })
    if (key.status !== 200) throw new Error(`key: ${key.status} ${JSON.stringify(key.body)}`)
    return { accountId: created.body.id, key: key.body.api_key, keyId: key.body.id }
  }
})

export interface GatedProbe {
  /** Pass as FFPROBE_PATH. */
  readonly path: string
  /** Lets every waiting and later ffprobe run go ahead. */
  readonly open: () => void
  /** Holds later ffprobe runs again. */
  readonly close: () => void
}

/** An ffprobe that waits for its gate file before running the real ffprobe. */
export const gatedProbe = (): GatedProbe => {
  const dir = tempDir("hookline-probe-")
  const gate = join(dir, "open")
  const real = ffprobePath
  const path = join(dir, "ffprobe")
  // Also goes on once the directory is gone (removed after the tests), so no waiting probe outlives them.
  writeFileSync(path, `#!/bin/sh\nwhile [ ! -f '${gate}' ] && [ -d '${dir}' ]; do sleep 0.05; done\nexec '${real}' "$@"\n`)
  chmodSync(path, 0o755)
  return {
    path,
    open: () => {
      if (!existsSync(gate)) writeFileSync(gate, "")
    },
    close: () => rmSync(gate, { force: true })
  }
}

/** One small MP4 (1 s, 160x120, a cut at 0.5 s) made with ffmpeg; returns its bytes. */
export const smallClip = async (): Promise<Uint8Array<ArrayBuffer>> => {
  const ffmpeg = ffmpegPath
  const path = join(tempDir("hookline-clip-"), "clip.mp4")
  const child = Bun.spawn([
    ffmpeg, "-hide_banner", "-v", "error", "-y",
    "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10:duration=0.5",
    "-f", "lavfi", "-i", "mandelbrot=size=160x120:rate=10",
    "-filter_complex", "[1:v]trim=duration=0.5,setpts=PTS-STARTPTS[b];[0:v][b]concat=n=2:v=1[v]",
    "-map", "[v]", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", path
  ], { stdin: "ignore", stdout: "ignore", stderr: "pipe" })
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited])
  if (code !== 0) throw new Error(`ffmpeg failed: ${stderr}`)
  return new Uint8Array(await Bun.file(path).arrayBuffer())
}

/** Asks for an upload link and PUTs the clip; returns the prediction id (queued once this resolves). */
export const submitClip = async (server: Pick<ServerProcess, "request">, key: string, clip: Uint8Array<ArrayBuffer>) => {
  const link = await server.request<UploadLink>("/v1/predict/upload", {
    method: "POST",
    key
  })
  if (link.status !== 200) throw new Error(`upload link: ${link.status} ${JSON.stringify(link.body)}`)
  const put = await fetch(link.body.upload_url, { method: "PUT", body: clip, headers: { "content-type": "video/mp4" } })
  if (put.status !== 200) throw new Error(`upload PUT: ${put.status} ${await put.text()}`)
  return { predictionId: link.body.prediction_id, uploadId: link.body.upload_id }
}

/** `count` free loopback ports in a row (a supervisor gives its child i METRICS_PORT + i). */
export const freeConsecutivePorts = (count: number): number => {
  for (;;) {
    const first = freePort()
    const probes: Array<ReturnType<typeof Bun.serve>> = []
    try {
      for (let i = 0; i < count; i++) probes.push(Bun.serve({ port: first + i, hostname: "127.0.0.1", fetch: () => new Response() }))
      return first
    } catch {
      // one of the next ports is taken: try elsewhere
    } finally {
      for (const probe of probes) probe.stop(true)
    }
  }
}

/** The pids of a process's children (Linux: /proc/<pid>/task/<tid>/children). */
export const childPids = (pid: number): Array<number> => {
  const tasks = existsSync(`/proc/${pid}/task`) ? readdirSync(`/proc/${pid}/task`) : []
  return tasks.flatMap((task) => {
    const file = `/proc/${pid}/task/${task}/children`
    const text = existsSync(file) ? readFileSync(file, "utf8").trim() : ""
    return text === "" ? [] : text.split(/\s+/).map(Number)
  })
}

/**
 * A catalog to search, through the admin API: the category `fitness` and `count` hooks whose
 * text all share `word` ("<word> hook number <i>"). Returns the import's answer body.
 */
export const importWordCatalog = async (server: Pick<ServerProcess, "request">, adminToken: string, word: string, count: number) => {
  const categories = await server.request("/admin/catalog/categories", { method: "PUT", key: adminToken, body: [{ slug: "fitness", name: "Fitness" }] })
  if (categories.status !== 200) throw new Error(`categories: ${categories.status} ${JSON.stringify(categories.body)}`)
  const imported = await server.request("/admin/catalog/hooks", {
    method: "POST",
    key: adminToken,
    rawBody: Array.from({ length: count }, (_, i) =>
      JSON.stringify({
        text: `${word} hook number ${i}`,
        platform: "tiktok",
        source_url: `https://tiktok.example/${word}/${i}`,
        category: "fitness",
        published_at: new Date(Date.UTC(2025, 0, 1 + i)).toISOString()
      })).join("\n"),
    headers: { "content-type": "application/x-ndjson" }
  })
  return imported.body
}
