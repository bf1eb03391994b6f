/**
 * The demo catalog generator: deterministic, valid, varied; seeding a database directly; and
 * the whole catalog (migration 0002, search, lists, cursors) on the embedded PGlite database.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { Result } from "effect"
import { rmSync } from "node:fs"
import { join } from "node:path"
import { seedDemoDatabase } from "../src/Hooks/DemoCatalog.js"
import { defaultDemoSeed, demoCatalogEnd, demoCategories, demoHook } from "../src/Hooks/DemoData.js"
import { derivedHookId, validateHookRecord } from "../src/Hooks/HookRecord.js"
import { embeddedEnvironment, freePort, startUntilBanner } from "./support/process.js"
import { createDatabase, dropDatabase, type HookPage, startTestServer, type TestServer, testPool } from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

describe("the generator", () => {
  const sample = Array.from({ length: 5_000 }, (_, i) => demoHook(i))

  test("is deterministic per index and seed", () => {
    expect(demoHook(1234)).toEqual(sample[1234])
    expect(demoHook(1234, defaultDemoSeed)).toEqual(sample[1234])
    expect(demoHook(1234, 7).text === sample[1234].text && demoHook(1234, 7).id === sample[1234].id).toBe(false)
    expect(new Set(sample.map((hook) => hook.id)).size).toBe(sample.length)
  })

  test("every hook is a valid import record whose id derives from platform + source_url", () => {
    for (const hook of sample) {
      const { id: _id, ...withoutId } = hook
      const validated = validateHookRecord(withoutId)
      expect(Result.getOrThrow(validated)).toEqual(hook)
      expect(hook.id).toBe(derivedHookId(hook.platform, hook.source_url!))
    }
  })

  test("covers about a dozen categories, several platforms, two years of dates and a varied vocabulary", () => {
    const slugs = new Set(demoCategories.map((c) => c.slug))
    const used = new Set(sample.map((hook) => hook.category).filter((c) => c !== null))
    expect(used).toEqual(slugs)
    expect(slugs.size).toBeGreaterThanOrEqual(12)
    expect(new Set(sample.map((hook) => hook.platform)).size).toBeGreaterThanOrEqual(3)
    const dates = sample.flatMap((hook) => (hook.published_at === null ? [] : [Date.parse(hook.published_at)]))
    const twoYears = 730 * 86_400_000
    expect(Math.min(...dates)).toBeGreaterThanOrEqual(demoCatalogEnd - twoYears)
    expect(Math.max(...dates)).toBeLessThanOrEqual(demoCatalogEnd)
    expect(Math.max(...dates) - Math.min(...dates)).toBeGreaterThan(twoYears * 0.95)
    const words = new Set(sample.flatMap((hook) => hook.text.toLowerCase().split(/[^a-z]+/)))
    expect(words.size).toBeGreaterThan(800)
    expect(new Set(sample.map((hook) => hook.text)).size).toBeGreaterThan(4_000)
    // Some hooks know little, as scraped data does; most know everything.
    expect(sample.some((hook) => hook.emotions === null && hook.metrics === null)).toBe(true)
    expect(sample.filter((hook) => hook.emotions !== null && hook.comment_themes !== null).length).toBeGreaterThan(4_500)
  })
})

describe("seeding a database", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  })
  afterAll(() => server.close())

  test("writes the categories and N hooks; seeding again changes nothing", async () => {
    const progress: Array<number> = []
    await seedDemoDatabase(server.databaseUrl, 3_000, { batchSize: 1_000, onProgress: (written) => progress.push(written) })
    expect(progress.sort((a, b) => a - b)).toEqual([1_000, 2_000, 3_000])
    const counts = async () =>
      (await server.db.query("SELECT (SELECT count(*) FROM hooks)::int AS hooks, (SELECT count(*) FROM hook_search)::int AS indexed, (SELECT count(*) FROM categories)::int AS categories")).rows[0]
    expect(await counts()).toEqual({ hooks: 3_000, indexed: 3_000, categories: demoCategories.length })
    await seedDemoDatabase(server.databaseUrl, 3_000)
    expect(await counts()).toEqual({ hooks: 3_000, indexed: 3_000, categories: demoCategories.length })

    const { key } = await server.account({ plan: "enterprise", monthly_balance: 100 })
    const search = await server.request<HookPage>("/v1/hooks/search?q=money", { key })
    expect(search.body.data).toHaveLength(50)
    expect(search.body.has_more).toBe(true)
    const list = await server.request<HookPage>("/v1/hooks/list?category=fitness", { key })
    expect(list.body.data.every((hook) => hook.category === "fitness")).toBe(true)
  })
})

describe("npm run admin -- catalog seed-demo", () => {
  test("imports the categories and hooks 0 … N-1 through the import route; running it again updates, never duplicates", async () => {
    const databaseUrl = await createDatabase()
    const db = testPool(databaseUrl, 1)
    try {
      const seed = () => {
        const run = Bun.spawnSync([process.execPath, "src/Admin/Cli.ts", "catalog", "seed-demo", "--count", "1200"], {
          cwd: join(import.meta.dir, ".."),
          env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: "warning" }
        })
        expect(run.exitCode).toBe(0)
        return JSON.parse(run.stdout.toString()) as { inserted: number; updated: number; rejected_count: number }
      }
      expect(seed()).toMatchObject({ inserted: 1_200, updated: 0, rejected_count: 0 })
      expect(seed()).toMatchObject({ inserted: 0, rejected_count: 0 })
      const { rows } = await db.query<{ hooks: number; categories: number }>(
        "SELECT (SELECT count(*) FROM hooks)::int AS hooks, (SELECT count(*) FROM categories)::int AS categories"
      )
      expect(rows[0]).toEqual({ hooks: 1_200, categories: demoCategories.length })
      const last = demoHook(1_199)
      const stored = await db.query<{ text: string; category: string | null }>("SELECT text, category FROM hooks WHERE id = $1", [last.id])
      expect(stored.rows).toEqual([{ text: last.text, category: last.category }])
    } finally {
      await db.end()
      await dropDatabase(databaseUrl)
    }
  }, 60_000)
})

describe("embedded mode", () => {
  const dataDir = tempDir("hookline-catalog-embedded-")
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }))

  test("the demo catalog is searchable, listable and pageable on PGlite", async () => {
    const port = freePort()
    const { child, output } = await startUntilBanner(embeddedEnvironment(dataDir, port, 300))
    try {
      const key = /demo API key:\s+(hkl_live_\S+)/.exec(output)![1]
      const get = async <T = HookPage>(path: string) => {
        const response = await fetch(`http://127.0.0.1:${port}${path}`, { headers: { authorization: `Bearer ${key}` } })
        return { status: response.status, body: (await response.json()) as T }
      }
      const categories = await get<{ data: ReadonlyArray<unknown> }>("/v1/hooks/categories")
      expect(categories.body.data).toHaveLength(demoCategories.length)

      // A common word, walked to the end: every match once.
      const seen: Array<string> = []
      let page = await get("/v1/hooks/search?q=the")
      for (;;) {
        expect(page.status).toBe(200)
        seen.push(...page.body.data.map((hook) => hook.id))
        if (page.body.next_cursor === null) break
        page = await get(`/v1/hooks/search?q=the&cursor=${page.body.next_cursor}`)
      }
      const expected = Array.from({ length: 300 }, (_, i) => demoHook(i)).filter((hook) => hook.text.toLowerCase().includes("the"))
      expect(seen.sort()).toEqual(expected.map((hook) => hook.id).sort())

      const ranked = await get("/v1/hooks/search?q=save%20money")
      expect(ranked.status).toBe(200)
      const listed = await get("/v1/hooks/list?category=travel")
      expect(listed.body.data.length).toBeGreaterThan(0)
      const one = await get<unknown>(`/v1/hooks/${listed.body.data[0].id}`)
      expect(one.body).toEqual(demoHook(Array.from({ length: 300 }, (_, i) => demoHook(i)).findIndex((hook) => hook.id === listed.body.data[0].id)))
    } finally {
      child.kill("SIGTERM")
      await child.exited
    }
  }, 60_000)
})
