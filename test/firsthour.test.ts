/**
 * The first hour with Hookline: what a newcomer following the README does, from
 * `npm start` to stopping it. Stopping `npm start` by its PID; the start-up banner with
 * SEED_DEMO=false; a local webhook receiver; the tour's paging query; the reference
 * (/openapi.json, /docs); the admin CLI away from its data; and the messages of common mistakes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { request as httpRequest } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { brotliDecompressSync, gunzipSync } from "node:zlib"
import Pg from "pg"
import { importExampleLine } from "../src/Admin/ImportCommand.js"
import { seedDemoDatabase } from "../src/Hooks/DemoCatalog.js"
import { expectEnvelope } from "./support/envelope.js"
import { baseEnvironment, embeddedEnvironment, freePort, smallClip, startUntilBanner } from "./support/process.js"
import { eventually } from "./support/receiver.js"
import {
  type ErrorBody,
  type HookPage,
  type OpenApiDocument,
  startTestServer,
  type TestServer,
  type UploadLink,
  type WalletBody,
  type WebhookBody,
  type WebhookSecretBody,
  type WebhookTestBody
} from "./support/server.js"

const root = join(import.meta.dir, "..")
const bun = process.execPath

/** Started with the development settings of the README's local-receiver step. */
let laptop: TestServer
/** The same database, served without them (and with a short SEARCH_TIMEOUT). */
let strict: TestServer

beforeAll(async () => {
  laptop = await startTestServer({ WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true" })
  // One deployment: the same database, secrets and blob directory (either may score the other's upload).
  strict = await startTestServer({ SEARCH_TIMEOUT: "300 millis", DATA_DIR: laptop.dataDir }, { databaseUrl: laptop.databaseUrl })
  await seedDemoDatabase(laptop.databaseUrl, 2_000)
})
afterAll(async () => {
  await strict.close()
  await laptop.close()
})

const messageOf = (response: { body: unknown }) => (response.body as ErrorBody).error.message

const walletOf = async (server: TestServer, key: string) => (await server.request<WalletBody>("/v1/wallet", { key })).body

describe("npm start", () => {
  test("SIGTERM to the npm process stops the server: the port closes and a final line is logged; SEED_DEMO=false still prints where everything is", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "hookline-npm-start-"))
    const port = freePort()
    try {
      const env = { ...embeddedEnvironment(dataDir, port, 50), SEED_DEMO: "false", LOG_LEVEL: "Info" }
      const { child, output } = await startUntilBanner(env, ["npm", "start"])
      expect(output).toContain(`Hookline is running on http://localhost:${port} (embedded database in ${dataDir})`)
      expect(output).toMatch(/admin token: +\S+/)
      expect(output).toContain(`admin API:     http://localhost:${port}/admin/`)
      expect(output).toContain("No demo account (SEED_DEMO=false)")
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200)

      child.kill("SIGTERM")
      expect(await child.exited).toBe(0)
      await eventually("the port to close", () =>
        fetch(`http://127.0.0.1:${port}/healthz`).then(() => false, () => true))
      const reader = child.stdout.getReader()
      let rest = ""
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += new TextDecoder().decode(chunk.value)
      expect(rest).toContain("shutting down: refusing new requests")
      expect(rest).toContain("Hookline stopped")
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, 120_000)
})

describe("webhooks on a laptop", () => {
  test("the README's local receiver gets a test delivery and verifies its signature with standardwebhooks", async () => {
    const { key } = await laptop.account()
    const port = freePort()
    const put = await laptop.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key, body: { url: `http://127.0.0.1:${port}/` } })
    expect(put.status).toBe(200)
    const receiver = Bun.spawn([bun, "examples/webhook-receiver.ts", put.body.secret, String(port)], { cwd: root, stdout: "pipe", stderr: "pipe" })
    try {
      let printed = ""
      const reader = receiver.stdout.getReader()
      const readLine = async (wanted: string) => {
        while (!printed.includes(wanted)) {
          const { value, done } = await reader.read()
          if (done) throw new Error(`receiver exited: ${printed}`)
          printed += new TextDecoder().decode(value)
        }
      }
      await readLine("listening")
      const sent = await laptop.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key })
      expect(sent.status).toBe(200)
      expect(sent.body).toEqual({ object: "webhook_test", delivered: true, status_code: 204, event: "prediction.succeeded" })
      await readLine("[test send]")
      expect(printed).toMatch(/verified prediction\.succeeded evt_\w+ \(webhook-id evt_\w+\) \[test send\]/)
    } finally {
      receiver.kill()
    }
  }, 60_000)

  test("without the settings, the 422s name them, and the test send says the configured URL is refused", async () => {
    const { key } = await laptop.account()
    const url = `http://127.0.0.1:${freePort()}/`
    expect((await laptop.request("/v1/webhooks", { method: "PUT", key, body: { url } })).status).toBe(200)

    const insecure = await strict.request("/v1/webhooks", { method: "PUT", key, body: { url: "http://example.com/hook" } })
    expectEnvelope(insecure, 422, "validation_error")
    expect(messageOf(insecure)).toBe("url: must use https (a server run for local development allows http:// with WEBHOOK_ALLOW_INSECURE=true)")
    const loopback = await strict.request("/v1/webhooks", { method: "PUT", key, body: { url: "https://127.0.0.1/hook" } })
    expectEnvelope(loopback, 422, "validation_error")
    expect(messageOf(loopback)).toBe(
      "url: 127.0.0.1 is a loopback address; webhooks must reach a public address " +
        "(a server run for local development allows others with WEBHOOK_ALLOW_PRIVATE=true)"
    )

    const sent = await strict.request("/v1/webhooks/test", { method: "POST", key })
    expectEnvelope(sent, 422, "validation_error")
    expect(messageOf(sent)).toBe(
      `The configured webhook URL ${url} is refused by this server: it must use https ` +
        "(a server run for local development allows http:// with WEBHOOK_ALLOW_INSECURE=true). Set another with PUT /v1/webhooks."
    )
    // The refused PUTs changed nothing.
    expect((await strict.request<WebhookBody>("/v1/webhooks", { key })).body).toEqual({
      object: "webhook",
      url,
      configured: true,
      events: ["*"],
      disabled_reason: null,
      disabled_at: null
    })
  })
})

describe("the tour on the demo catalog", () => {
  test("the cursor step's query has a second page", async () => {
    const { key } = await laptop.account({ monthly_balance: 100 })
    const first = await laptop.request<HookPage>("/v1/hooks/search?q=routine", { key })
    expect(first.status).toBe(200)
    expect(first.body.data).toHaveLength(50)
    expect(first.body.has_more).toBe(true)
    const second = await laptop.request<HookPage>(`/v1/hooks/search?q=routine&cursor=${first.body.next_cursor}`, { key })
    expect(second.status).toBe(200)
    expect(second.body.data.length).toBeGreaterThan(0)
    const firstIds = new Set(first.body.data.map((hook) => hook.id))
    expect(second.body.data.some((hook) => firstIds.has(hook.id))).toBe(false)
  })
})

/** GET with a given Accept-Encoding, the body as sent (fetch would decompress it). */
const rawGet = (url: string, acceptEncoding: string) =>
  new Promise<{ headers: Record<string, string | Array<string> | undefined>; body: Buffer }>((resolve, reject) => {
    httpRequest(url, { headers: { "accept-encoding": acceptEncoding } }, (response) => {
      const chunks: Array<Buffer> = []
      response.on("data", (chunk: Buffer) => chunks.push(chunk))
      response.on("end", () => resolve({ headers: response.headers, body: Buffer.concat(chunks) }))
      response.on("error", reject)
    }).on("error", reject).end()
  })

interface OpenApiExtras {
  readonly servers: ReadonlyArray<{ readonly url: string }>
  readonly paths: Readonly<Record<string, Readonly<Record<string, {
    readonly requestBody?: { readonly required: boolean; readonly content: Readonly<Record<string, unknown>> }
    readonly responses: Readonly<Record<string, { readonly description: string; readonly content?: Readonly<Record<string, unknown>> }>>
  }>>>>
}

describe("the reference", () => {
  test("/openapi.json: the upload's body, list's and search's 503, a server, and /metrics' format", async () => {
    const spec = (await strict.request<OpenApiDocument & OpenApiExtras>("/openapi.json")).body
    expect(spec.servers[0].url).toBe("/")
    const upload = spec.paths["/uploads/{token}"].put.requestBody
    expect(upload?.required).toBe(true)
    expect(Object.keys(upload?.content ?? {}).toSorted()).toEqual(["application/octet-stream", "video/mp4", "video/quicktime", "video/webm"])
    for (const route of ["/v1/hooks/search", "/v1/hooks/list"]) {
      expect(spec.paths[route].get.responses["503"].description).toStartWith("The search timed out")
    }
    const metrics = spec.paths["/metrics"].get.responses["200"]
    expect(metrics.description).toContain("Prometheus text exposition format")
    expect(Object.keys(metrics.content ?? {})).toEqual(["text/plain; version=0.0.4; charset=utf-8"])
  })

  test("/docs is Swagger UI with the OpenAPI document inlined, compressed for clients that accept it", async () => {
    const brotli = await rawGet(`${strict.url}/docs`, "gzip, deflate, br")
    expect(brotli.headers["content-encoding"]).toBe("br")
    expect(brotli.headers["vary"]).toBe("accept-encoding")
    const html = brotliDecompressSync(brotli.body).toString()
    const inlined = /<script id="swagger-spec" type="application\/json">([\s\S]*?)<\/script>/.exec(html)
    const spec = await (await fetch(`${strict.url}/openapi.json`)).json()
    expect(JSON.parse(inlined?.[1] ?? "null")).toEqual(spec)
    expect(brotli.body.length).toBeLessThan(html.length / 3)

    const gzip = await rawGet(`${strict.url}/docs`, "gzip")
    expect(gzip.headers["content-encoding"]).toBe("gzip")
    expect(gunzipSync(gzip.body).toString()).toBe(html)

    const plain = await rawGet(`${strict.url}/docs`, "br;q=0, identity")
    expect(plain.headers["content-encoding"]).toBeUndefined()
    expect(plain.headers["content-type"]).toBe("text/html; charset=utf-8")
    expect(plain.body.toString()).toBe(html)
  })

  test("a list that runs longer than SEARCH_TIMEOUT is answered 503 and charges nothing", async () => {
    const { accountId, key } = await strict.account({ plan: "enterprise", monthly_balance: 10 })
    const blocker = new Pg.Client({ connectionString: strict.databaseUrl })
    await blocker.connect()
    try {
      await blocker.query("BEGIN")
      await blocker.query("LOCK TABLE hook_search IN ACCESS EXCLUSIVE MODE")
      const response = await strict.request("/v1/hooks/list?category=fitness", { key })
      expectEnvelope(response, 503, "service_unavailable")
      expect(messageOf(response)).toBe("The list took longer than 300ms; retry in a moment.")
      expect(response.headers.get("x-credits-charged")).toBeNull()
      await blocker.query("ROLLBACK")
    } finally {
      await blocker.end()
    }
    const { rows } = await strict.db.query<{ journal: number; pending: number }>(
      `SELECT (SELECT sum(amount)::int FROM credit_journal WHERE account_id = $1) AS journal,
              (SELECT count(*)::int FROM holds WHERE account_id = $1 AND status = 'pending') AS pending`,
      [accountId]
    )
    expect(rows[0]).toEqual({ journal: 10, pending: 0 })
    expect((await walletOf(strict, key)).monthly_balance).toBe(10)
    expect((await strict.request("/v1/hooks/list?category=fitness", { key })).status).toBe(200)
  })
})

describe("messages of common mistakes", () => {
  test("a category that is not a slug: the rule in words and where the slugs are; nothing charged", async () => {
    const { key } = await strict.account({ monthly_balance: 10 })
    const response = await strict.request("/v1/hooks/list?category=Fitness", { key })
    expectEnvelope(response, 422, "validation_error")
    expect(messageOf(response)).toBe(
      "category: must be a category slug: 1 to 64 lowercase letters and digits, in groups joined by single hyphens " +
        "(GET /v1/hooks/categories lists them)"
    )
    expect(response.headers.get("x-credits-charged")).toBeNull()
    expect((await walletOf(strict, key)).monthly_balance).toBe(10)
  })

  test("a search without q says what q is", async () => {
    const { key } = await strict.account({ monthly_balance: 10 })
    const response = await strict.request("/v1/hooks/search", { key })
    expectEnvelope(response, 422, "validation_error")
    expect(messageOf(response)).toBe("q: is missing: q is the text to search for, 1 to 200 characters (e.g. ?q=morning+routine)")
    expect((await walletOf(strict, key)).monthly_balance).toBe(10)
  })

  test("a form upload or an empty body: 415 saying to send raw bytes, and the link still works", async () => {
    const { key } = await strict.account({ monthly_balance: 100 })
    const link = (await strict.request<UploadLink>("/v1/predict/upload", { method: "POST", key })).body
    // The link names PUBLIC_BASE_URL; the test server listens on a random port.
    const uploadUrl = strict.url + new URL(link.upload_url).pathname
    const clip = await smallClip()
    const form = new FormData()
    form.append("file", new Blob([clip], { type: "video/mp4" }), "clip.mp4")
    const expected = "The body is not an MP4, MOV or WebM video (it is empty, a form upload or another kind of file). " +
      "Send the file's raw bytes as the body: curl -X PUT --data-binary @clip.mp4 <upload_url>. " +
      "This upload link is still usable until it expires."
    for (const body of [form, ""]) {
      const refused = await fetch(uploadUrl, { method: "PUT", body })
      const answer = { status: refused.status, headers: refused.headers, body: await refused.json() }
      expectEnvelope(answer, 415, "unsupported_media_type")
      expect(messageOf(answer)).toBe(expected)
    }
    expect((await walletOf(strict, key)).monthly_balance).toBe(100)
    const accepted = await fetch(uploadUrl, { method: "PUT", body: clip })
    expect(accepted.status).toBe(200)
    expect(await accepted.json()).toEqual({ object: "upload", upload_id: link.upload_id, prediction_id: link.prediction_id, status: "received" })
  })

  test("a POST to an upload link: 404 suggesting PUT, without echoing the token", async () => {
    const { key } = await strict.account()
    const link = (await strict.request<UploadLink>("/v1/predict/upload", { method: "POST", key })).body
    const token = new URL(link.upload_url).pathname.split("/").pop()!
    const response = await strict.request(new URL(link.upload_url).pathname, { method: "POST", rawBody: "x" })
    expectEnvelope(response, 404, "not_found")
    expect(messageOf(response)).toBe("No route for POST /uploads/:token; this path takes PUT.")
    expect(JSON.stringify(response.body)).not.toContain(token)
    const wrongMethod = await strict.request("/v1/wallet", { method: "DELETE", key })
    expect(messageOf(wrongMethod)).toBe("No route for DELETE /v1/wallet; this path takes GET.")
  })
})

describe("npm run clip", () => {
  test("writes a new file in the temp directory each run, or the path it is given", () => {
    const clip = (...args: Array<string>) => Bun.spawnSync([bun, "scripts/make-clip.ts", ...args], { cwd: root, env: baseEnvironment() })
    const dir = mkdtempSync(join(tmpdir(), "hookline-clip-test-"))
    const written: Array<string> = []
    try {
      for (let i = 0; i < 2; i++) {
        const run = clip()
        expect(run.exitCode).toBe(0)
        written.push(run.stdout.toString().trim())
      }
      expect(written[0]).not.toBe(written[1])
      for (const path of written) {
        expect(path.startsWith(join(tmpdir(), "hookline-clip-"))).toBe(true)
        expect(readFileSync(path).subarray(4, 8).toString()).toBe("ftyp")
      }
      const given = clip(join(dir, "mine.mp4"))
      expect(given.stdout.toString().trim()).toBe(join(dir, "mine.mp4"))
      expect(existsSync(join(dir, "mine.mp4"))).toBe(true)
    } finally {
      for (const path of written) rmSync(path, { force: true })
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe("the admin CLI", () => {
  test("npm run admin -- --help prints the usage and exits 0", () => {
    const help = Bun.spawnSync(["npm", "run", "--silent", "admin", "--", "--help"], { cwd: root, env: baseEnvironment() })
    expect(help.exitCode).toBe(0)
    expect(help.stdout.toString()).toContain("Usage: npm run admin -- <command>")
    expect(help.stdout.toString()).toContain("credits grant <account_id>")
  })

  test("--help and operations.md show an NDJSON line the import takes, and that line imports", async () => {
    const help = Bun.spawnSync([bun, "src/Admin/Cli.ts", "--help"], { cwd: root, env: baseEnvironment() }).stdout.toString()
    const example = help.split("\n").map((line) => line.trim()).find((line) => line.startsWith("{"))!
    expect(example).toBe(importExampleLine)
    expect(readFileSync(join(root, "docs/operations.md"), "utf8")).toContain(importExampleLine)
    const imported = await laptop.admin("/admin/catalog/hooks", {
      method: "POST",
      rawBody: example,
      headers: { "content-type": "application/x-ndjson" }
    })
    expect(imported.status).toBe(200)
    expect(imported.body).toMatchObject({ inserted: 1, rejected_count: 0 })
  })

  test("run where there is no data directory, it creates none and says where it looked", () => {
    const cwd = mkdtempSync(join(tmpdir(), "hookline-cli-away-"))
    try {
      const run = Bun.spawnSync([bun, join(root, "src/Admin/Cli.ts"), "accounts", "get", "acct_0"], { cwd, env: baseEnvironment() })
      expect(run.exitCode).toBe(1)
      expect(run.stdout.toString()).toBe("")
      expect(run.stderr.toString()).toContain(`No Hookline database in ${join(cwd, ".hookline")}; nothing was created.`)
      expect(run.stderr.toString()).toContain("npm run admin -- migrate")
      expect(existsSync(join(cwd, ".hookline"))).toBe(false)
      expect(readdirSync(cwd)).toEqual([])
    } finally {
      rmSync(cwd, { recursive: true, force: true })
    }
  })
})

/** Reads a process's stdout until `pattern` matches a line; fails loudly after `timeoutMs`. */
const lineMatching = async (stream: ReadableStream<Uint8Array>, pattern: RegExp, timeoutMs = 20_000): Promise<string> => {
  const reader = stream.getReader()
  const deadline = setTimeout(() => void reader.cancel(`no line matching ${pattern} within ${timeoutMs} ms`), timeoutMs)
  let text = ""
  try {
    for (;;) {
      const line = text.split("\n").find((candidate) => pattern.test(candidate))
      if (line !== undefined) return line
      const { value, done } = await reader.read()
      if (done) throw new Error(`no line matching ${pattern} in:\n${text}`)
      text += new TextDecoder().decode(value)
    }
  } finally {
    clearTimeout(deadline)
    reader.releaseLock()
  }
}

describe("the terminal during the first hour", () => {
  test("the first start says it is creating the database, the access log is one line a request, a taken port names PORT", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "hookline-terminal-"))
    const otherDataDir = mkdtempSync(join(tmpdir(), "hookline-taken-"))
    const port = freePort()
    const env = { ...embeddedEnvironment(dataDir, port, 50), LOG_LEVEL: "Info" }
    try {
      const { child, output } = await startUntilBanner(env)
      const creating = output.indexOf(`creating the embedded database in ${dataDir} (first start`)
      expect(creating).toBeGreaterThanOrEqual(0)
      expect(creating).toBeLessThan(output.indexOf("Hookline is running"))
      const key = /demo API key: +(\S+)/.exec(output)![1]

      const wallet = await fetch(`http://127.0.0.1:${port}/v1/wallet`, { headers: { authorization: `Bearer ${key}` } })
      expect(wallet.status).toBe(200)
      const requestId = wallet.headers.get("x-request-id")!
      const accessLine = await lineMatching(child.stdout, /route=\/v1\/wallet/)
      expect(accessLine).toMatch(
        new RegExp(`^\\[\\d\\d:\\d\\d:\\d\\d\\.\\d{3}\\] INFO request method=GET route=/v1/wallet path=/v1/wallet status=200 duration_ms=[\\d.]+ client=127\\.0\\.0\\.1 request_id=${requestId}$`)
      )

      const taken = Bun.spawnSync([bun, "src/main.ts"], { cwd: root, env: { ...env, DATA_DIR: otherDataDir } })
      expect(taken.exitCode).toBe(1)
      const printed = taken.stdout.toString() + taken.stderr.toString()
      expect(printed).toContain(`Port ${port} is in use`)
      expect(printed).toContain(`choose another port with PORT, e.g. PORT=${port + 1} npm start`)
      // That one line, not followed by the runtime's report of the failure and its stack.
      expect(printed.split("\n").filter((line) => line.includes("is in use"))).toHaveLength(1)
      expect(printed).not.toMatch(/^\s+at /m)
      expect(printed).not.toContain("ServerStartFailed")
      // The port is checked before the embedded database is made: nothing was created for the refused start.
      expect(printed).not.toContain("embedded database")
      expect(readdirSync(otherDataDir)).toEqual([])

      child.kill("SIGTERM")
      expect(await child.exited).toBe(0)
      const again = await startUntilBanner(env)
      expect(again.output).toContain(`opening the embedded database in ${dataDir}`)
      expect(again.output).not.toContain("creating the embedded database")
      again.child.kill("SIGTERM")
      expect(await again.child.exited).toBe(0)
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
      rmSync(otherDataDir, { recursive: true, force: true })
    }
  }, 120_000)

  test("an unknown query parameter is refused with the parameters the endpoint takes", async () => {
    const { key } = await strict.account()
    const response = await strict.request("/v1/hooks/search?query=x", { key })
    expectEnvelope(response, 422, "validation_error")
    expect(messageOf(response)).toBe("query: is not an allowed property (allowed: q, cursor)")
  })
})
