/**
 * POST /admin/catalog/hooks: streamed JSON-array and NDJSON imports, per-record validation with
 * positions, idempotent re-imports, and the same function reading a file for CLIs.
 */
import { PgClient } from "@effect/sql-pg"
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Cause, ConfigProvider, Effect, Exit, Layer, Redacted, Result, Stream } from "effect"
import { createHash } from "node:crypto"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { ProgressReporter } from "../src/Admin/ImportProgress.js"
import { CatalogImport } from "../src/Hooks/CatalogImport.js"
import { importHooks, type ImportProgress, importHooksFromFile } from "../src/Hooks/Import.js"
import { type ErrorBody, type HookPage, type HookRichBody, type ImportResult, startTestServer, type TestServer } from "./support/server.js"

let server: TestServer
let key: string

beforeAll(async () => {
  server = await startTestServer({ IMPORT_BATCH_SIZE: "7" })
  key = (await server.account({ plan: "enterprise", monthly_balance: 10_000 })).key
})
afterAll(() => server.close())

const ndjson = (lines: ReadonlyArray<unknown>) => lines.map((line) => (typeof line === "string" ? line : JSON.stringify(line))).join("\n")

const importBody = <T = ImportResult>(body: BodyInit, contentType = "application/x-ndjson") =>
  server.admin<T>("/admin/catalog/hooks", { method: "POST", rawBody: body, headers: { "content-type": contentType } })

const derivedId = (platform: string, sourceUrl: string) =>
  `hook_${createHash("sha256").update(`${platform}\n${sourceUrl}`).digest("hex").slice(0, 32)}`

const count = async (where: string, params: ReadonlyArray<unknown>) =>
  (await server.db.query(`SELECT count(*)::int AS n FROM hooks WHERE ${where}`, params as Array<unknown>)).rows[0].n as number

const searchIds = async (q: string) =>
  (await server.request<HookPage>(`/v1/hooks/search?q=${encodeURIComponent(q)}`, { key })).body.data.map((h) => h.id)

describe("NDJSON", () => {
  test("bad lines are rejected with their 1-based line numbers; the rest is imported", async () => {
    const good = { text: "Ploverwick first", platform: "tiktok", source_url: "https://tiktok.example/1" }
    const body = ndjson([
      good, // line 1
      "", // line 2: blank, skipped
      "{not json", // 3
      { platform: "tiktok", source_url: "https://tiktok.example/2" }, // 4: no text
      { text: "Ploverwick bad slug", platform: "tiktok", source_url: "https://tiktok.example/3", category: "Not_A_Slug" }, // 5
      { text: "Ploverwick extra", platform: "tiktok", source_url: "https://tiktok.example/4", views: 3 }, // 6
      { text: "Ploverwick no source", platform: "tiktok" }, // 7
      { id: "hook_123", text: "Ploverwick bad id", platform: "tiktok" }, // 8
      { text: "Ploverwick date", platform: "tiktok", source_url: "https://tiktok.example/5", published_at: "yesterday" }, // 9
      { text: "Ploverwick fear", platform: "tiktok", source_url: "https://tiktok.example/6", emotions: { inspiration: 1, fear: 101, curiosity: 0, satisfaction: 0, happiness: 0, anger: 0, surprise: 0 } }, // 10
      { text: "   ", platform: "tiktok", source_url: "https://tiktok.example/7" }, // 11
      { text: "x".repeat(501), platform: "tiktok", source_url: "https://tiktok.example/8" }, // 12
      "[1, 2]", // 13
      { text: "Ploverwick themes", platform: "tiktok", source_url: "https://tiktok.example/9", comment_themes: [{ word: "wow" }] }, // 14
      { text: "Ploverwick last", platform: "instagram", source_url: "https://tiktok.example/10", published_at: "2025-02-03T04:05:06.789123+02:00" } // 15
    ])
    const response = await importBody(body + "\n")
    expect(response.status).toBe(200)
    expect(response.body.object).toBe("import_result")
    expect(response.body.inserted).toBe(2)
    expect(response.body.updated).toBe(0)
    expect(response.body.rejected_count).toBe(12)
    const byLine = Object.fromEntries(response.body.rejected.map((r) => [r.index, r.message]))
    expect(Object.keys(byLine).map(Number)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    expect(byLine[3]).toContain("not valid JSON")
    expect(byLine[4]).toBe("text: is required")
    expect(byLine[5]).toStartWith("category:")
    expect(byLine[6]).toBe("views: is not a field of a hook")
    expect(byLine[7]).toContain("source_url")
    expect(byLine[8]).toStartWith("id:")
    expect(byLine[9]).toStartWith("published_at:")
    expect(byLine[10]).toStartWith("emotions.fear:")
    expect(byLine[11]).toStartWith("text:")
    expect(byLine[12]).toStartWith("text:")
    expect(byLine[13]).toStartWith("record:")
    expect(byLine[14]).toStartWith("comment_themes.0.count:")

    const first = derivedId("tiktok", "https://tiktok.example/1")
    const last = derivedId("instagram", "https://tiktok.example/10")
    expect(await searchIds("ploverwick")).toEqual([last, first])
    const hook = await server.request<HookRichBody>(`/v1/hooks/${last}`, { key })
    expect(hook.body.published_at).toBe("2025-02-03T02:05:06.789Z")
    expect(hook.body.source_url).toBe("https://tiktok.example/10")
  })

  test("a published_at that names no day (February 30th, 24:00) is rejected, not rolled over into the next month", async () => {
    const record = (n: number, published_at: string) =>
      ({ text: `Quillmarsh ${n}`, platform: "tiktok", source_url: `https://tiktok.example/calendar/${n}`, published_at })
    const response = await importBody(ndjson([
      record(1, "2026-02-30T10:00:00Z"),
      record(2, "2026-03-01T24:00:00Z"),
      record(3, "2028-02-29T10:00:00Z")
    ]))
    expect(response.status).toBe(200)
    expect(response.body.inserted).toBe(1)
    expect(response.body.rejected.map((r) => [r.index, r.message.split(":")[0]])).toEqual([[1, "published_at"], [2, "published_at"]])
  })

  test("a re-import updates the same hooks instead of duplicating them", async () => {
    const records = Array.from({ length: 20 }, (_, i) => ({
      text: `Sandpiperlux take one ${i}`,
      platform: "youtube",
      source_url: `https://youtube.example/shorts/${i}`,
      published_at: `2025-01-${String(i + 1).padStart(2, "0")}T00:00:00.000Z`
    }))
    const first = await importBody(ndjson(records))
    expect(first.body).toEqual({ object: "import_result", inserted: 20, updated: 0, rejected_count: 0, rejected: [] })
    expect(await searchIds("sandpiperlux")).toHaveLength(20)

    const changed = records.map((record) => ({ ...record, text: record.text.replace("take one", "take two") }))
    changed.push({ text: "Sandpiperlux take two new", platform: "youtube", source_url: "https://youtube.example/shorts/new", published_at: "2024-01-01T00:00:00.000Z" })
    const second = await importBody(ndjson(changed))
    expect(second.body).toEqual({ object: "import_result", inserted: 1, updated: 20, rejected_count: 0, rejected: [] })
    expect(await count("text LIKE 'Sandpiperlux%'", [])).toBe(21)
    // The cached first page was replaced: the new text is what search sees.
    expect(await searchIds("sandpiperlux one")).toEqual([])
    expect(await searchIds("sandpiperlux two")).toHaveLength(21)
  })

  test("an explicit id is kept, and a repeated id in one body updates the earlier record", async () => {
    const id = "hook_0123456789abcdef0123456789abcdef"
    const response = await importBody(ndjson([
      { id, text: "Kestrelmoon draft", platform: "tiktok" },
      { id, text: "Kestrelmoon final", platform: "tiktok", caption: "final" }
    ]))
    expect(response.body).toMatchObject({ inserted: 1, updated: 1, rejected_count: 0 })
    const hook = await server.request<HookRichBody>(`/v1/hooks/${id}`, { key })
    expect(hook.body).toMatchObject({ id, text: "Kestrelmoon final", caption: "final" })
  })

  test("Windows line endings, a missing final newline and a too-large line are handled", async () => {
    const body = [
      JSON.stringify({ text: "Crlfowl one", platform: "tiktok", source_url: "https://crlf.example/1" }),
      JSON.stringify({ text: `Crlfowl big ${"y".repeat(1_100_000)}`, platform: "tiktok", source_url: "https://crlf.example/2" }),
      JSON.stringify({ text: "Crlfowl three", platform: "tiktok", source_url: "https://crlf.example/3" })
    ].join("\r\n")
    const response = await importBody(body)
    expect(response.body.inserted).toBe(2)
    expect(response.body.rejected).toEqual([{ index: 2, message: "the record is larger than 1048576 bytes" }])
  })

  test("a record holding the NUL character is rejected alone; its batch is still imported", async () => {
    const response = await importBody(ndjson([
      { text: "Nulhawk one", platform: "tiktok", source_url: "https://nul.example/1" },
      { text: "Nulhawk \u0000 two", platform: "tiktok", source_url: "https://nul.example/2" },
      { text: "Nulhawk three", platform: "tiktok", source_url: "https://nul.example/3", metrics: { "views\u0000": 1 } },
      { text: "Nulhawk four", platform: "tiktok", source_url: "https://nul.example/4" }
    ]))
    expect(response.status).toBe(200)
    expect(response.body).toMatchObject({ inserted: 2, updated: 0, rejected_count: 2 })
    expect(response.body.rejected).toEqual([
      { index: 2, message: "text: must not contain the NUL character (U+0000)" },
      { index: 3, message: "metrics.views\u0000: must not contain the NUL character (U+0000)" }
    ])
    expect(await count("text LIKE 'Nulhawk%'", [])).toBe(2)
  })

  test("tabs, backslashes, line breaks and COPY's text-format markers come back exactly as sent, in every kind of field", async () => {
    const tricky = "Copywren\ttab \\N back\\slash \\. line\nbreak cr\r \"quoted\" 🎣 é"
    const record = {
      text: tricky,
      platform: "tik\ttok",
      source_url: "https://copy.example/\\N",
      caption: "\\.\n\\",
      summary: "\\",
      hook_duration_sec: 1.25e-7,
      comment_themes: [{ word: "tab\tword\\", count: 3 }],
      creator: { handle: "back\\slash\ttab\nline", followers: 12 },
      metrics: { "key\twith\\tab": [1, "\\N", null] },
      audio: null
    }
    const response = await importBody(ndjson([record]))
    expect(response.body).toMatchObject({ inserted: 1, rejected_count: 0 })
    const hook = await server.request<HookRichBody>(`/v1/hooks/${derivedId(record.platform, record.source_url)}`, { key })
    expect(hook.body).toMatchObject({ ...record, media_type: null, thumbnail_url: null, category: null, published_at: null, duration_sec: null, emotions: null })
    expect(await searchIds("copywren")).toEqual([derivedId(record.platform, record.source_url)])
  })
})

describe("JSON array", () => {
  test("bad elements are rejected by 0-based position; brackets and commas inside strings do not confuse it", async () => {
    const body = `[
      {"text": "Ternquill [one], {with} \\"brackets\\", and commas", "platform": "tiktok", "source_url": "https://tern.example/0",
       "metrics": {"views": [1, 2, {"deep": "]"}]}},
      {"text": "Ternquill broken", "platform": },
      42,
      "a string",
      {"text": "Ternquill three", "platform": "tiktok", "source_url": "https://tern.example/4", "audio": null}
    ]`
    const response = await importBody(body, "application/json")
    expect(response.status).toBe(200)
    expect(response.body.inserted).toBe(2)
    expect(response.body.rejected.map((r) => r.index)).toEqual([1, 2, 3])
    expect(response.body.rejected[0].message).toContain("not valid JSON")
    const hook = await server.request<HookRichBody>(`/v1/hooks/${derivedId("tiktok", "https://tern.example/0")}`, { key })
    expect(hook.body.text).toBe("Ternquill [one], {with} \"brackets\", and commas")
    expect(hook.body.metrics).toEqual({ views: [1, 2, { deep: "]" }] })
  })

  test("a body streamed in tiny chunks that split records and characters imports the same", async () => {
    const records = Array.from({ length: 40 }, (_, i) => ({
      text: `Gännetstream ✨ ${i} naïve café`,
      platform: "tiktok",
      source_url: `https://chunk.example/${i}`
    }))
    const bytes = new TextEncoder().encode(JSON.stringify(records, null, 1))
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let at = 0; at < bytes.byteLength; at += 5) controller.enqueue(bytes.subarray(at, at + 5))
        controller.close()
      }
    })
    const response = await fetch(`${server.url}/admin/catalog/hooks`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.adminToken}`, "content-type": "application/json" },
      body: stream
    })
    expect(await response.json()).toEqual({ object: "import_result", inserted: 40, updated: 0, rejected_count: 0, rejected: [] })
    const hook = await server.request<HookRichBody>(`/v1/hooks/${derivedId("tiktok", "https://chunk.example/7")}`, { key })
    expect(hook.body.text).toBe("Gännetstream ✨ 7 naïve café")
  })

  test("an unclosed array keeps what was read and reports the end", async () => {
    const response = await importBody(`[{"text": "Unclosedwren", "platform": "tiktok", "source_url": "https://u.example/1"}, {"text": "cut`, "application/json")
    expect(response.body.inserted).toBe(1)
    expect(response.body.rejected).toEqual([{ index: 1, message: "the JSON array is not closed (the body ended inside this record)" }])
  })

  test("data after the array is reported and ignored", async () => {
    const response = await importBody(`[{"text": "Trailingtit", "platform": "tiktok", "source_url": "https://t.example/1"}] {"x": 1}`, "application/json")
    expect(response.body.inserted).toBe(1)
    expect(response.body.rejected).toEqual([{ index: 1, message: "unexpected data after the end of the JSON array (ignored)" }])
  })
})

describe("requests the import refuses as a whole", () => {
  test.each([
    ["an object instead of an array", `{"text": "x", "platform": "tiktok"}`, "application/json"],
    ["an empty body", "", "application/json"],
    ["an unsupported content type", "text,platform\nx,tiktok", "text/csv"]
  ])("%s → 422 validation_error", async (_name, body, contentType) => {
    const response = await importBody<ErrorBody>(body, contentType)
    expect(response.status).toBe(422)
    expect(response.body.error.type).toBe("validation_error")
  })

  test("without the admin token → 401", async () => {
    const response = await server.request("/admin/catalog/hooks", { method: "POST", rawBody: "[]", headers: { "content-type": "application/json" } })
    expect(response.status).toBe(401)
  })

  test("an empty array imports nothing", async () => {
    expect((await importBody("[]", "application/json")).body).toEqual({ object: "import_result", inserted: 0, updated: 0, rejected_count: 0, rejected: [] })
  })
})

describe("a bug while importing", () => {
  test("is a defect (no typed failure, so never a 422 validation error) and writes nothing", async () => {
    const before = await count("true", [])
    const valid = new TextEncoder().encode(JSON.stringify({ text: "Bugwren", platform: "tiktok", source_url: "https://bug.example/1" }) + "\n")
    // A chunk that is not bytes makes the splitter throw a TypeError: a bug, not a bad record.
    const broken = Stream.make(valid, null as unknown as Uint8Array)
    const catalog = CatalogImport.layer.pipe(Layer.provideMerge(PgClient.layer({ url: Redacted.make(server.databaseUrl) })))
    const exit = await Effect.runPromiseExit(importHooks(broken, { format: "ndjson" }).pipe(Effect.provide(catalog)))
    expect(Exit.isFailure(exit)).toBe(true)
    if (Exit.isFailure(exit)) {
      expect(Cause.hasFails(exit.cause)).toBe(false)
      expect(Result.getOrThrow(Cause.findDefect(exit.cause))).toBeInstanceOf(TypeError)
    }
    expect(await count("true", [])).toBe(before)
  })
})

describe("importing a file (the CLI path)", () => {
  test("streams a file with progress reports and the same results", async () => {
    const path = join(server.dataDir, "hooks.ndjson")
    writeFileSync(path, ndjson(Array.from({ length: 25 }, (_, i) => ({ text: `Filefinch ${i}`, platform: "tiktok", source_url: `https://file.example/${i}` }))))
    const progress: Array<ImportProgress> = []
    const database = PgClient.layer({ url: Redacted.make(server.databaseUrl) })
    const catalog = CatalogImport.layer.pipe(
      Layer.provideMerge(database),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { IMPORT_BATCH_SIZE: "10" } })))
    )
    const result = await Effect.runPromise(
      importHooksFromFile(path, { onProgress: (p) => progress.push(p) }).pipe(Effect.provide(catalog))
    )
    expect(result).toEqual({ object: "import_result", inserted: 25, updated: 0, rejected_count: 0, rejected: [] })
    // Staged batch by batch; the counts of what was written come with the commit.
    expect(progress.map((p) => [p.staged, p.inserted])).toEqual([[10, 0], [20, 0], [25, 0], [25, 25]])
    expect(progress.at(-1)?.records).toBe(25)
    expect(await searchIds("filefinch")).toHaveLength(25)
  })
})

describe("the CLI's import progress on a pipe", () => {
  const lines = (intervalMs: number, points: ReadonlyArray<number>) => {
    const written: Array<string> = []
    const progress = new ProgressReporter("hooks.ndjson", { bytes: 1_000 }, { isTTY: false, write: (text) => written.push(text) }, intervalMs)
    for (const [index, bytes] of points.entries()) progress.update({ bytes, lines: (index + 1) * 10, hooks: (index + 1) * 10 })
    progress.stop()
    return written.map((line) => line.replace(/, \S+ hooks\/s\n$/, ""))
  }

  test("a short import prints its line once: the last, at the end", () => {
    expect(lines(10_000, [1_000])).toEqual(["hooks.ndjson: 100.0% (0/0 MiB, 10 lines)"])
  })

  test("with a line per update the end adds none that says the same", () => {
    const written = lines(0, [500, 1_000])
    expect(written).toHaveLength(2)
    expect(written[1]).toBe("hooks.ndjson: 100.0% (0/0 MiB, 20 lines)")
  })
})
