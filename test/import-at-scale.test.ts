/**
 * Import at scale: the CLI sends a file in requests under the body limit and reports positions
 * in the file; a failed request stops the import with the line to resume from, and resuming
 * lands every hook once; a body over IMPORT_MAX_BODY_BYTES writes nothing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { defaultChunking, importNdjson, ImportStopped, type NdjsonSource } from "../src/Admin/ImportCommand.js"
import { demoHook } from "../src/Hooks/DemoData.js"
import { expectEnvelope } from "./support/envelope.js"
import { createDatabase, dropDatabase, type ErrorBody, startTestServer, testPool, type TestServer } from "./support/server.js"

const demoLines = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => JSON.stringify(demoHook(from + i)))

const catalogCounts = async (db: { query: TestServer["db"]["query"] }) =>
  (await db.query<{ hooks: number; distinct_ids: number; searchable: number; counted: number }>(
    `SELECT (SELECT count(*) FROM hooks)::int AS hooks, (SELECT count(DISTINCT id) FROM hooks)::int AS distinct_ids,
            (SELECT count(*) FROM hook_search)::int AS searchable, (SELECT hooks FROM catalog_state)::int AS counted`
  )).rows[0]

describe("npm run admin -- catalog import (NDJSON in several requests)", () => {
  test("every hook lands once and rejections carry their line number in the file", async () => {
    const databaseUrl = await createDatabase()
    const db = testPool(databaseUrl, 1)
    try {
      const lines = demoLines(0, 1_500)
      // Bad records near the start, in the middle and at the end of the file.
      lines.splice(9, 0, "{not json")
      lines.splice(700, 0, JSON.stringify({ text: "no platform" }))
      lines.push(JSON.stringify({ ...demoHook(0), category: "Not A Slug" }))
      const path = join(tmpdir(), `hookline-test-import-${process.pid}.ndjson`)
      writeFileSync(path, lines.join("\n") + "\n")
      const run = Bun.spawnSync([process.execPath, "src/Admin/Cli.ts", "catalog", "import", path, "--chunk-bytes", "100000"], {
        cwd: join(import.meta.dir, ".."),
        env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: "warning", IMPORT_PROGRESS_INTERVAL_MS: "0" }
      })
      Bun.file(path).delete()
      expect(run.stderr.toString()).toContain("100.0% (1/1 MiB, 1,503 lines)")
      expect(run.exitCode).toBe(0)
      const summary = JSON.parse(run.stdout.toString()) as { inserted: number; updated: number; requests: number; rejected: Array<{ index: number; message: string }> }
      expect(summary.requests).toBeGreaterThan(10)
      expect(summary.inserted).toBe(1_500)
      expect(summary.updated).toBe(0)
      expect(summary.rejected.map((r) => r.index)).toEqual([10, 701, 1_503])
      expect(summary.rejected[1].message).toBe("platform: is required")
      expect(await catalogCounts(db)).toEqual({ hooks: 1_500, distinct_ids: 1_500, searchable: 1_500, counted: 1_500 })
    } finally {
      await db.end()
      await dropDatabase(databaseUrl)
    }
  }, 120_000)
})

describe("a request that fails", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer({ IMPORT_MAX_BODY_BYTES: "60000" })
  })
  afterAll(() => server.close())

  const silent = { write: () => true }
  const sourceOf = (text: string): NdjsonSource => ({
    label: "test",
    stream: new Blob([text]).stream(),
    total: { bytes: text.length },
    resumeCommand: (line) => `resume --from-line ${line}`
  })

  test("stops the import with the line to resume from; resuming there lands every hook once", async () => {
    const text = demoLines(10_000, 10_400).join("\n") + "\n"
    // A proxy that lets the server commit the third request and every later one, but loses the
    // answers. It counts the requests whose body arrived whole.
    let requests = 0
    const proxy = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: async (request) => {
        const body = await request.arrayBuffer()
        requests++
        const forwarded = await fetch(`${server.url}${new URL(request.url).pathname}`, { method: request.method, headers: request.headers, body })
        if (requests < 3) return forwarded
        await forwarded.arrayBuffer()
        return new Response("bad gateway", { status: 502 })
      }
    })
    const options = { ...defaultChunking, chunkBytes: 40_000, retries: 1, retryDelayMs: 0 }
    let stopped: ImportStopped | null = null
    try {
      await importNdjson({ baseUrl: `http://127.0.0.1:${proxy.port}`, adminToken: server.adminToken }, sourceOf(text), options, silent)
    } catch (error) {
      if (!(error instanceof ImportStopped)) throw error
      stopped = error
    } finally {
      proxy.stop(true)
    }
    expect(stopped).not.toBeNull()
    // Two answered, the third and its one retry lost; the fourth, sent ahead, never completed.
    expect(requests).toBe(4)
    const resumeLine = stopped!.resumeLine
    expect(stopped!.summary.lines_read).toBe(resumeLine - 1)
    expect(stopped!.message).toContain("HTTP 502")
    expect(stopped!.message).toContain(`resume --from-line ${resumeLine}`)
    expect(stopped!.summary.inserted).toBe(resumeLine - 1)

    const resumed = await importNdjson({ baseUrl: server.url, adminToken: server.adminToken }, sourceOf(text), { ...options, fromLine: resumeLine }, silent)
    // Every line counted once across both runs; the lost request had committed, so its hooks
    // come back as updates, never as new rows.
    expect(stopped!.summary.inserted + resumed.inserted + resumed.updated).toBe(400)
    expect(resumed.updated).toBeGreaterThan(0)
    expect(resumed.lines_read).toBe(400)
    expect(await catalogCounts(server.db)).toEqual({ hooks: 400, distinct_ids: 400, searchable: 400, counted: 400 })
  }, 60_000)

  test("requests sent ahead still write in file order: of two records with one id in different requests, the later wins, search row too", async () => {
    const first = demoHook(40_000)
    // The later record goes in the second request, which is sent while the first one commits.
    const lines = demoLines(40_000, 40_060)
    lines.splice(12, 0, JSON.stringify({ ...first, text: "Quokkafinch rewritten opening line" }))
    const text = lines.join("\n") + "\n"
    const options = { ...defaultChunking, chunkBytes: 8_000 }
    const summary = await importNdjson({ baseUrl: server.url, adminToken: server.adminToken }, sourceOf(text), options, silent)
    expect(summary.requests).toBeGreaterThan(4)
    expect(Buffer.byteLength(lines.slice(0, 12).join("\n"))).toBeGreaterThan(options.chunkBytes)
    expect([summary.inserted, summary.updated]).toEqual([60, 1])
    const { rows } = await server.db.query<{ text: string; folded: string; matches: boolean }>(
      `SELECT h.text, s.folded, s.doc @@ plainto_tsquery('english', 'quokkafinch') AS matches
         FROM hooks h JOIN hook_search s ON s.id = h.id WHERE h.id = $1`,
      [first.id]
    )
    expect(rows).toEqual([{ text: "Quokkafinch rewritten opening line", folded: "quokkafinch rewritten opening line", matches: true }])
  })

  test("a declared body over IMPORT_MAX_BODY_BYTES is refused at once with 413 and nothing is written", async () => {
    const before = await catalogCounts(server.db)
    const body = demoLines(20_000, 20_100).join("\n")
    expect(body.length).toBeGreaterThan(60_000)
    const response = await server.admin<ErrorBody>("/admin/catalog/hooks", { method: "POST", rawBody: body, headers: { "content-type": "application/x-ndjson" } })
    expectEnvelope(response, 413, "payload_too_large")
    expect(response.body.error.message).toContain("nothing was imported")
    expect(await catalogCounts(server.db)).toEqual(before)
  })

  test("a streamed body that passes the limit is stopped there: 413 and nothing is written", async () => {
    const before = await catalogCounts(server.db)
    const lines = demoLines(30_000, 30_100)
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const line of lines) controller.enqueue(new TextEncoder().encode(line + "\n"))
        controller.close()
      }
    })
    const response = await fetch(`${server.url}/admin/catalog/hooks`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.adminToken}`, "content-type": "application/x-ndjson" },
      body: stream
    })
    expectEnvelope({ status: response.status, headers: response.headers, body: await response.json() }, 413, "payload_too_large")
    expect(await catalogCounts(server.db)).toEqual(before)
    expect((await server.db.query("SELECT count(*)::int AS n FROM hooks WHERE id = $1", [demoHook(30_000).id])).rows[0].n).toBe(0)
  })
})
