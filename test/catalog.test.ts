/**
 * The hook catalog over real HTTP: validation and statuses, ranking, stemming, the substring
 * fallback, keyset pagination with signed cursors, metering and the HookRich shape.
 * Each test uses its own made-up words so fixtures never meet in one another's results.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { createHash } from "node:crypto"
import Pg from "pg"
import { hookColumns, upsertHooksSql } from "../src/Hooks/CatalogSql.js"
import type { HookRecord } from "../src/Hooks/HookRecord.js"
import { type ErrorBody, type HookPage, ledgerState, type Response, startTestServer, statementsRunning, type TestServer } from "./support/server.js"
import { expectEnvelope } from "./support/envelope.js"
import { eventually } from "./support/receiver.js"
import { hookRecord } from "./support/hookRecord.js"

let server: TestServer
let key: string
let accountId: string

beforeAll(async () => {
  server = await startTestServer()
  ;({ key, accountId } = await server.account({ plan: "enterprise", monthly_balance: 100_000 }))
  await server.admin("/admin/catalog/categories", {
    method: "PUT",
    body: [
      { slug: "fitness", name: "Fitness" },
      { slug: "personal-finance", name: "Personal Finance" },
      { slug: "food-cooking", name: "Food & Cooking" },
      { slug: "empty-shelf", name: "An Empty Shelf" }
    ]
  })
})
afterAll(() => server.close())

let serial = 0
/** A fresh hook id whose hex part starts with `hex` (so tests can fix the id order). */
const hookId = (hex = "") => {
  serial++
  return `hook_${(hex + createHash("sha256").update(`fixture-${serial}`).digest("hex")).slice(0, 32)}`
}

const day = (n: number) => new Date(Date.UTC(2025, 0, 1) + n * 86_400_000).toISOString()

const hook = (fields: Partial<HookRecord> & { readonly text: string }): HookRecord => hookRecord(hookId(), fields.text, fields)

const jsonColumns = new Set(["emotions", "comment_themes", "metrics", "creator", "audio"])

/** Writes hooks straight into the database (the import route has its own tests). */
const insert = async (hooks: ReadonlyArray<HookRecord>) => {
  const params = hookColumns.map((column) =>
    hooks.map((record) => {
      const value = record[column]
      return jsonColumns.has(column) && value !== null ? JSON.stringify(value) : value
    })
  )
  await server.db.query(upsertHooksSql, params)
  return hooks
}

const search = <T = HookPage>(q: string, cursor?: string, options: { key?: string } = {}) =>
  server.request<T>(`/v1/hooks/search?${new URLSearchParams(cursor === undefined ? { q } : { q, cursor })}`, { key: options.key ?? key })

const list = <T = HookPage>(category: string, cursor?: string, options: { key?: string } = {}) =>
  server.request<T>(`/v1/hooks/list?${new URLSearchParams(cursor === undefined ? { category } : { category, cursor })}`, {
    key: options.key ?? key
  })

const ids = (response: Response<HookPage>): Array<string> => response.body.data.map((item) => item.id)

/** An error answer, never charged. */
const expectError = (response: Response, status: number, type: string) => {
  expectEnvelope(response, status, type)
  expect(response.headers.get("x-credits-charged")).toBeNull()
}

/** Follows next_cursor to the end; returns every page's ids. */
const walk = async (first: () => Promise<Response<HookPage>>, next: (cursor: string) => Promise<Response<HookPage>>, between?: () => Promise<void>) => {
  const pages: Array<Array<string>> = []
  let response = await first()
  for (;;) {
    expect(response.status).toBe(200)
    pages.push(ids(response))
    expect(response.body.has_more).toBe(response.body.next_cursor !== null)
    if (response.body.next_cursor === null) return pages
    if (between !== undefined) await between()
    response = await next(response.body.next_cursor)
  }
}

/** Every match of q in PostgreSQL's own ts_rank order, ties newest first, then by id: what search must answer. */
const rankedByTsRank = async (q: string) =>
  (await server.db.query<{ id: string }>(
    `SELECT id FROM hooks WHERE to_tsvector('english', text) @@ plainto_tsquery('english', $1)
      ORDER BY ts_rank(to_tsvector('english', text), plainto_tsquery('english', $1)) DESC, published_at DESC NULLS LAST, id DESC`,
    [q]
  )).rows.map((row) => row.id)

/** Every page of hook_search_page for q, following its keyset positions, at the given page size and walk window. */
const searchFunctionPages = async (q: string, pageSize: number, walkWindow: number) => {
  const out: Array<string> = []
  let after: [number | null, number | null, string | null] = [null, null, null]
  for (;;) {
    const { rows } = await server.db.query<{ id: string; k1: number | null; k2: string }>(
      "SELECT id, k1, k2 FROM hook_search_page($1, $2, $3, $4, $5, $6)",
      [q, ...after, pageSize, walkWindow]
    )
    out.push(...rows.map((row) => row.id))
    if (rows.length < pageSize) return out
    const last = rows[rows.length - 1]
    after = [last.k1, Number(last.k2), last.id]
  }
}

/** q's `count` matches come in ts_rank's order from hook_search_page at each page size and walk window, and over HTTP. */
const expectTsRankOrder = async (q: string, count: number, sizesAndWindows: ReadonlyArray<readonly [number, number]>) => {
  const expected = await rankedByTsRank(q)
  expect(expected).toHaveLength(count)
  for (const [pageSize, walkWindow] of sizesAndWindows) expect(await searchFunctionPages(q, pageSize, walkWindow)).toEqual(expected)
  const pages = await walk(() => search(q), (cursor) => search(q, cursor))
  expect(pages.flat()).toEqual(expected)
}

/** A fresh account whose balances and journal prove what was (not) charged. */
const freshAccount = async (credits = 100) => server.account({ plan: "enterprise", monthly_balance: credits })

describe("GET /v1/hooks/categories", () => {
  test("lists every category ordered by name, in one page, for free", async () => {
    const account = await freshAccount(10)
    const response = await server.request("/v1/hooks/categories", { key: account.key })
    expect(response.status).toBe(200)
    expect(response.body).toEqual({
      object: "list",
      data: [
        { slug: "empty-shelf", name: "An Empty Shelf" },
        { slug: "fitness", name: "Fitness" },
        { slug: "food-cooking", name: "Food & Cooking" },
        { slug: "personal-finance", name: "Personal Finance" }
      ],
      has_more: false,
      next_cursor: null
    })
    expect(response.headers.get("x-credits-charged")).toBeNull()
    expect((await ledgerState(server.db, account.accountId)).monthly).toBe(10)
  })

  test("needs only a valid key, not hooks:read", async () => {
    const account = await server.account({ scopes: ["predict:write"] })
    expect((await server.request("/v1/hooks/categories", { key: account.key })).status).toBe(200)
  })
})

describe("validation happens before any charge", () => {
  const rejected: ReadonlyArray<readonly [string, string, number, string]> = [
    ["search without q", "/v1/hooks/search", 422, "validation_error"],
    ["search with an empty q", "/v1/hooks/search?q=", 422, "validation_error"],
    ["search with a blank q", "/v1/hooks/search?q=%20%20%20", 422, "validation_error"],
    ["search with a 201-character q", `/v1/hooks/search?q=${"a".repeat(201)}`, 422, "validation_error"],
    ["search with an unknown parameter", "/v1/hooks/search?q=money&sort=new", 422, "validation_error"],
    ["search with a garbage cursor", "/v1/hooks/search?q=money&cursor=not-a-cursor", 400, "invalid_cursor"],
    ["search with an empty cursor", "/v1/hooks/search?q=money&cursor=", 400, "invalid_cursor"],
    ["list without category", "/v1/hooks/list", 422, "validation_error"],
    ["list with an empty category", "/v1/hooks/list?category=", 422, "validation_error"],
    ["list with upper case", "/v1/hooks/list?category=Fitness", 422, "validation_error"],
    ["list with a double hyphen", "/v1/hooks/list?category=personal--finance", 422, "validation_error"],
    ["list with a leading hyphen", "/v1/hooks/list?category=-fitness", 422, "validation_error"],
    ["list with a trailing hyphen", "/v1/hooks/list?category=fitness-", 422, "validation_error"],
    ["list with an underscore", "/v1/hooks/list?category=personal_finance", 422, "validation_error"],
    ["list with 65 characters", `/v1/hooks/list?category=${"a".repeat(65)}`, 422, "validation_error"],
    ["list with an unknown slug", "/v1/hooks/list?category=knitting", 422, "validation_error"],
    ["list with a garbage cursor", "/v1/hooks/list?category=fitness&cursor=xyz", 400, "invalid_cursor"],
    ["get with a malformed id", "/v1/hooks/hook_123", 404, "not_found"],
    ["get with upper-case hex", "/v1/hooks/hook_0000000000000000000000000000000A", 404, "not_found"],
    ["get with another prefix", "/v1/hooks/pred_00000000000000000000000000000000", 404, "not_found"],
    ["get with an unknown id", "/v1/hooks/hook_ffffffffffffffffffffffffffffffff", 404, "not_found"]
  ]

  test.each(rejected)("%s → %d %s, nothing charged", async (_name, path, status, type) => {
    const account = await freshAccount(10)
    const response = await server.request(path, { key: account.key })
    expectError(response, status, type)
    const state = await ledgerState(server.db, account.accountId)
    expect(state).toMatchObject({ monthly: 10, journalMonthly: 10, pendingHolds: 0 })
    const { rows } = await server.db.query("SELECT count(*)::int AS n FROM holds WHERE account_id = $1", [account.accountId])
    expect(rows[0].n).toBe(0)
  })

  test("a 200-character q and a 64-character slug are within the limits", async () => {
    expect((await search("b".repeat(200))).status).toBe(200)
    const slug = "c".repeat(64)
    const response = await list<ErrorBody>(slug)
    expectError(response, 422, "validation_error")
    expect(response.body.error.message).toContain("unknown slug")
  })

  test("a blank q and an unknown slug say what is wrong", async () => {
    expect((await search<ErrorBody>("   ")).body.error.message).toContain("q")
    expect((await list<ErrorBody>("knitting")).body.error.message).toContain("knitting")
  })
})

describe("scopes and plans", () => {
  test("a key without hooks:read gets 403 api_not_enabled on search, list and get", async () => {
    const account = await server.account({ scopes: ["predict:write", "webhooks:write"], monthly_balance: 10 })
    for (const path of ["/v1/hooks/search?q=money", "/v1/hooks/list?category=fitness", "/v1/hooks/hook_ffffffffffffffffffffffffffffffff"]) {
      expectError(await server.request(path, { key: account.key }), 403, "api_not_enabled")
    }
    expect((await ledgerState(server.db, account.accountId)).monthly).toBe(10)
  })
})

describe("search ranking", () => {
  test("more occurrences rank higher; equal ranks go newest first, then by id descending", async () => {
    const [thrice, twice, newest, olderHighId, olderLowId, undated] = await insert([
      hook({ text: "Quokkanomics quokkanomics quokkanomics, again", published_at: day(1) }),
      hook({ text: "Quokkanomics twice: quokkanomics", published_at: day(2) }),
      hook({ text: "Quokkanomics, once, newest", published_at: day(30) }),
      hook({ id: hookId("f"), text: "Older quokkanomics", published_at: day(10) }),
      hook({ id: hookId("0"), text: "Also older quokkanomics", published_at: day(10) }),
      hook({ text: "Undated quokkanomics" })
    ])
    const response = await search("quokkanomics")
    expect(ids(response)).toEqual([thrice.id, twice.id, newest.id, olderHighId.id, olderLowId.id, undated.id])
  })

  test("one word: every page size follows ts_rank order across the occurrence tiers, ties newest then by id, undated last", async () => {
    const texts: Array<HookRecord> = []
    for (let i = 0; i < 70; i++) {
      const occurrences = [1, 1, 1, 2, 1, 3, 1, 2][i % 8]
      const published_at = i % 9 === 0 ? null : day(i % 6)
      texts.push(hook({ id: hookId(i % 2 === 0 ? "a" : "5"), text: `${"Vexilloquay ".repeat(occurrences)}number ${i}`, published_at }))
    }
    await insert(texts)
    const expected = await rankedByTsRank("vexilloquay")
    expect(expected).toHaveLength(70)
    for (const pageSize of [1, 4, 9, 51, 70, 100]) expect(await searchFunctionPages("Vexilloquays", pageSize, 10_000)).toEqual(expected)
    const pages = await walk(() => search("vexilloquay"), (cursor) => search("vexilloquay", cursor))
    expect(pages.map((page) => page.length)).toEqual([50, 20])
    expect(pages.flat()).toEqual(expected)
  })

  test("several words: all must appear, closer together ranks higher", async () => {
    const [adjacent, apart, far, onlyOne] = await insert([
      hook({ text: "Zorbleflip wumpusgate in one line", published_at: day(1) }),
      hook({ text: "Zorbleflip, then later a wumpusgate", published_at: day(5) }),
      hook({ text: "Zorbleflip: a very long story with many words before the wumpusgate arrives", published_at: day(9) }),
      hook({ text: "Only zorbleflip here", published_at: day(20) })
    ])
    const response = await search("zorbleflip wumpusgate")
    expect(ids(response)).toEqual([adjacent.id, apart.id, far.id])
    expect(ids(response)).not.toContain(onlyOne.id)
  })

  test("the order equals PostgreSQL's ts_rank order, ties by newest then id", async () => {
    const words = ["glimmerquartz", "yellowcrest", "pondwhistle"]
    const texts: Array<HookRecord> = []
    for (let i = 0; i < 90; i++) {
      const picked = words.filter((_, w) => (i >> w) % 2 === 1 || (i + w) % 5 === 0)
      const filler = ["the", "a morning", "every", "quietly", "and then"][i % 5]
      const body = [...picked, filler, ...picked.slice(0, i % 3)].join(" ")
      texts.push(hook({ text: `${body} ${i}`, published_at: i % 7 === 0 ? null : day(i % 13) }))
    }
    await insert(texts)
    for (const q of ["glimmerquartz", "glimmerquartz yellowcrest", "pondwhistle yellowcrest glimmerquartz"]) {
      const pages = await walk(() => search(q), (cursor) => search(q, cursor))
      expect(pages.flat()).toEqual(await rankedByTsRank(q))
    }
  })

  test("English stemming: running finds run, runs and ran's stem; savings finds save", async () => {
    const [run, runs, running, saving] = await insert([
      hook({ text: "Frumious run at dawn", published_at: day(1) }),
      hook({ text: "She frumious runs", published_at: day(2) }),
      hook({ text: "Frumious running club", published_at: day(3) }),
      hook({ text: "Frumious savings plan", published_at: day(4) })
    ])
    expect(new Set(ids(await search("frumious running")))).toEqual(new Set([run.id, runs.id, running.id]))
    expect(new Set(ids(await search("RUN frumious")))).toEqual(new Set([run.id, runs.id, running.id]))
    expect(ids(await search("frumious save"))).toEqual([saving.id])
  })

  test("case and extra spaces do not change the result", async () => {
    await insert([hook({ text: "Snorkelbat weekend", published_at: day(1) })])
    const plain = await search("snorkelbat")
    expect(ids(plain)).toHaveLength(1)
    expect(ids(await search("  SNORKELBAT  "))).toEqual(ids(plain))
  })
})

describe("the substring fallback", () => {
  test("a query with no searchable word matches text containing it, case-insensitively, newest first", async () => {
    const [older, capital, newest] = await insert([
      hook({ text: "Wobblequest ~~the~~ older", published_at: day(100) }),
      hook({ text: "~~THE~~ wobblequest capital", published_at: day(150) }),
      hook({ text: "Wobblequest ~~The~~ newest", published_at: day(200) }),
      hook({ text: "The wobblequest without tildes", published_at: day(300) })
    ])
    expect(ids(await search("~~the~~"))).toEqual([newest.id, capital.id, older.id])
    expect(ids(await search("  ~~THE~~ "))).toEqual([newest.id, capital.id, older.id])
  })

  test("a query of stop words only walks every hook containing it", async () => {
    await insert([hook({ text: "Over AND THE hills", published_at: day(7) })])
    const { rows } = await server.db.query<{ id: string }>(
      "SELECT id FROM hooks WHERE lower(text) LIKE '%and the%' ORDER BY published_at DESC NULLS LAST, id DESC"
    )
    expect(rows.length).toBeGreaterThan(0)
    const pages = await walk(() => search("and the"), (cursor) => search("and the", cursor))
    expect(pages.flat()).toEqual(rows.map((row) => row.id))
  })

  test("punctuation and emoji queries match as substrings", async () => {
    const [fire, question] = await insert([
      hook({ text: "Glorptastic 🫠🫠 result", published_at: day(300) }),
      hook({ text: "Is it glorptastic?!?", published_at: day(301) })
    ])
    expect(ids(await search("🫠🫠"))).toEqual([fire.id])
    expect(ids(await search("?!?"))).toEqual([question.id])
    expect(ids(await search("!!!!!!!!"))).toEqual([])
  })
})

describe("pagination", () => {
  const walkCost = async (pages: () => Promise<Array<Array<string>>>, account: { accountId: string }) => {
    const before = await ledgerState(server.db, account.accountId)
    const result = await pages()
    const after = await ledgerState(server.db, account.accountId)
    return { result, charged: before.monthly - after.monthly }
  }

  test("120 matches come as 50 + 50 + 20, each exactly once, costing 2 + 2 + 1", async () => {
    const fixtures = await insert(
      Array.from({ length: 120 }, (_, i) =>
        hook({
          text: i % 10 === 0 ? `Marmalux marmalux special ${i}` : `Marmalux number ${i}`,
          published_at: i % 9 === 0 ? null : day(i % 40),
          category: "fitness"
        }))
    )
    const account = await freshAccount(100)
    const { result: pages, charged } = await walkCost(
      () => walk(() => search("marmalux", undefined, account), (cursor) => search("marmalux", cursor, account)),
      account
    )
    expect(pages.map((page) => page.length)).toEqual([50, 50, 20])
    expect(new Set(pages.flat())).toEqual(new Set(fixtures.map((f) => f.id)))
    expect(pages.flat()).toHaveLength(120)
    expect(charged).toBe(5)
  })

  test("a list walks a category newest first, exactly once", async () => {
    const { rows } = await server.db.query<{ id: string }>(
      "SELECT id FROM hooks WHERE category = 'fitness' ORDER BY published_at DESC NULLS LAST, id DESC"
    )
    expect(rows.length).toBeGreaterThanOrEqual(120)
    const pages = await walk(() => list("fitness"), (cursor) => list("fitness", cursor))
    expect(pages.flat()).toEqual(rows.map((row) => row.id))
    expect(pages.slice(0, -1).every((page) => page.length === 50)).toBe(true)
  })

  test("hooks imported between pages never repeat or hide a match", async () => {
    const original = await insert(
      Array.from({ length: 120 }, (_, i) =>
        hook({
          text: `Gribblenook ${i % 3 === 0 ? "gribblenook" : "item"} and shelf ${i}`,
          published_at: day(i % 50),
          category: "food-cooking"
        }))
    )
    const originalIds = new Set(original.map((h) => h.id))
    for (const [name, first, next] of [
      ["one word", () => search("gribblenook"), (c: string) => search("gribblenook", c)],
      ["several words", () => search("gribblenook shelf"), (c: string) => search("gribblenook shelf", c)],
      ["substring", () => search("and"), (c: string) => search("and", c)],
      ["list", () => list("food-cooking"), (c: string) => list("food-cooking", c)]
    ] as const) {
      let round = 0
      const pages = await walk(first, next, async () => {
        round++
        // Newer, older and equally ranked hooks land while the walk is under way.
        await insert([
          hook({ text: `Gribblenook gribblenook gribblenook and shelf new ${name} ${round}`, published_at: day(999), category: "food-cooking" }),
          hook({ text: `Gribblenook and shelf old ${name} ${round}`, published_at: day(-999), category: "food-cooking" }),
          hook({ text: `Gribblenook and shelf mid ${name} ${round}`, published_at: day(25), category: "food-cooking" })
        ])
      })
      const seen = pages.flat()
      expect(new Set(seen).size).toBe(seen.length)
      const seenOriginal = seen.filter((id) => originalIds.has(id))
      expect(new Set(seenOriginal)).toEqual(originalIds)
    }
  })

  test("two-word queries: the adjacent tier, repeaters above and below it, and farther pairs keep ts_rank order", async () => {
    const texts: Array<HookRecord> = []
    for (let i = 0; i < 60; i++) texts.push(hook({ text: `Plumcake velvetine side by side ${i}`, published_at: day(i % 17) }))
    for (let i = 0; i < 8; i++) texts.push(hook({ text: `Plumcake plumcake velvetine repeated near ${i}`, published_at: day(i) }))
    for (let i = 0; i < 6; i++) {
      texts.push(hook({ text: `Plumcake ${"far ".repeat(20)} velvetine then plumcake at the end ${i}`, published_at: day(i) }))
    }
    for (let i = 0; i < 20; i++) texts.push(hook({ text: `Velvetine and the plumcake ${"x ".repeat(i % 4)}${i}`, published_at: i % 5 === 0 ? null : day(i) }))
    await insert(texts)
    for (const q of ["plumcake velvetine", "velvetine plumcakes"]) {
      await expectTsRankOrder(q, 94, [[7, 10_000], [7, 300], [7, 60], [7, 20], [20, 10_000], [51, 10_000], [3, 5], [3, 2], [1_000, 10_000]])
    }
  })

  test("a phrase with a stop word between its words: the tier one word apart, the few side by side and the repeaters above it keep ts_rank order", async () => {
    const texts: Array<HookRecord> = []
    for (let i = 0; i < 60; i++) {
      const text = i % 3 === 0 ? `Zandrel to quillworth, one apart ${i}` : `Quillworth to zandrel, one apart ${i}`
      texts.push(hook({ text, published_at: i % 11 === 0 ? null : day(i % 23) }))
    }
    for (let i = 0; i < 4; i++) texts.push(hook({ text: `Quillworth zandrel side by side ${i}`, published_at: day(i % 2) }))
    for (let i = 0; i < 5; i++) texts.push(hook({ text: `Quillworth quillworth to zandrel repeated ${i}`, published_at: day(i) }))
    for (let i = 0; i < 5; i++) texts.push(hook({ text: `Quillworth ${"far ".repeat(9)} zandrel ${"far ".repeat(9)} zandrel ${i}`, published_at: day(i) }))
    for (let i = 0; i < 12; i++) texts.push(hook({ text: `Zandrel and then the quillworth ${"x ".repeat(i % 3)}${i}`, published_at: day(i % 4) }))
    await insert(texts)
    // Page sizes under and over the 4 hooks side by side: the walk of the tier one apart, and the walk of the side-by-side tier.
    for (const q of ["quillworth to zandrel", "Zandrel I quillworths", "quillworth zandrel"]) {
      await expectTsRankOrder(q, 86, [[7, 10_000], [7, 300], [7, 40], [5, 20], [3, 10_000], [20, 10_000], [51, 10_000], [3, 2], [1_000, 10_000]])
    }
  })

  test("two words whose side-by-side tier sits behind newer hooks with the words far apart keep ts_rank order", async () => {
    const texts: Array<HookRecord> = []
    // The newest 30 hooks hold both words far apart but one, the fifth newest: a walk's first entries find one tier hook or none.
    for (let i = 0; i < 30; i++) {
      const text = i === 25 ? `Brindlemoss quorvane among the newest ${i}` : `Brindlemoss and then quite far from the quorvane ${i}`
      texts.push(hook({ text, published_at: day(100 + i) }))
    }
    for (let i = 0; i < 40; i++) texts.push(hook({ text: `Brindlemoss quorvane side by side ${i}`, published_at: day(i % 13) }))
    for (let i = 0; i < 4; i++) texts.push(hook({ text: `Quorvane brindlemoss brindlemoss repeated ${i}`, published_at: day(i) }))
    await insert(texts)
    // Page sizes whose first entries of the walk hold one tier hook or none, and small walk windows.
    await expectTsRankOrder("brindlemoss quorvane", 74, [[3, 10_000], [5, 10_000], [7, 10_000], [10, 10_000], [17, 10_000], [7, 8], [5, 3]])
  })

  test("the side-by-side index lists each pair of different words at adjacent positions once, in sorting order", async () => {
    const pairs = async (text: string) =>
      (await server.db.query<{ pairs: Array<string> }>("SELECT hook_search_side_by_side(to_tsvector('english', $1)) AS pairs", [text])).rows[0].pairs
    expect(await pairs("Wish I knew this sooner: wish knew, knew wish")).toEqual(["sooner wish", "knew wish"])
    expect(await pairs("Morning routine morning routine habits")).toEqual(["morn routin", "habit routin"])
    expect(await pairs("Sleep sleep sleep")).toEqual([])
    expect(await pairs("of the and")).toEqual([])
  })

  test("a search walks the same with the smallest and the default walk window", async () => {
    const window = (q: string, walkWindow: number) => searchFunctionPages(q, 7, walkWindow)
    for (const q of ["gribblenook", "marmalux", "gribblenook shelf", "and", "number 1", "nothingmatchesthis"]) {
      const reference = await window(q, 10_000)
      for (const size of [1, 3, 10, 40, 200, 1_000, 100_000]) expect(await window(q, size)).toEqual(reference)
    }
  })
})

describe("bad cursors", () => {
  let searchCursor: string
  let listCursor: string

  beforeAll(async () => {
    await insert(Array.from({ length: 60 }, (_, i) => hook({ text: `Blimpwhistle ${i}`, published_at: day(i), category: "personal-finance" })))
    searchCursor = (await search("blimpwhistle")).body.next_cursor!
    listCursor = (await list("personal-finance")).body.next_cursor!
    expect(typeof searchCursor).toBe("string")
    expect(typeof listCursor).toBe("string")
  })

  const altered = (cursor: string, at: number) =>
    cursor.slice(0, at) + (cursor[at] === "A" ? "B" : "A") + cursor.slice(at + 1)

  const cases: Record<string, (as: { key: string }) => Promise<Response>> = {
    "garbage": (as) => search("blimpwhistle", "garbage", as),
    "not base64url": (as) => search("blimpwhistle", "a+b/c==", as),
    "altered signature": (as) => search("blimpwhistle", altered(searchCursor, 5), as),
    "altered position": (as) => search("blimpwhistle", altered(searchCursor, searchCursor.length - 3), as),
    "truncated": (as) => search("blimpwhistle", searchCursor.slice(0, 20), as),
    "from list, used on search": (as) => search("blimpwhistle", listCursor, as),
    "from search, used on list": (as) => list("personal-finance", searchCursor, as),
    "from another query": (as) => search("blimpwhistles and more", searchCursor, as),
    "from another category": (as) => list("fitness", listCursor, as)
  }

  test.each(Object.keys(cases))("%s → 400 invalid_cursor, nothing charged", async (name) => {
    const account = await freshAccount(10)
    expectError(await cases[name](account), 400, "invalid_cursor")
    expect(await ledgerState(server.db, account.accountId)).toMatchObject({ monthly: 10, journalMonthly: 10, pendingHolds: 0 })
  })

  test("the same query with other spacing or case keeps its cursor valid", async () => {
    const response = await search("  BLIMPWHISTLE ", searchCursor)
    expect(response.status).toBe(200)
    expect(response.body.data).toHaveLength(10)
  })

  test("whitespace inside the query is collapsed for the cursor binding: runs of spaces, tabs and newlines are one space", async () => {
    const first = await search("blimpwhistle blimpwhistle")
    expect(first.status).toBe(200)
    const cursor = first.body.next_cursor!
    expect(typeof cursor).toBe("string")
    const spaced = await search(" Blimpwhistle \t\n   blimpwhistle  ", cursor)
    expect(spaced.status).toBe(200)
    expect(ids(spaced)).toEqual(ids(await search("blimpwhistle blimpwhistle", cursor)))
    expect(spaced.body.data.length).toBeGreaterThan(0)
  })
})

describe("metering", () => {
  beforeAll(async () => {
    const kind = (i: number) => (i < 20 ? "partial" : i < 46 ? "twentysix" : "other")
    await insert(Array.from({ length: 70 }, (_, i) => hook({ text: `Tinselbrook ${kind(i)} ${i}`, published_at: day(i) })))
  })

  const charges = async (path: string, credits = 100) => {
    const account = await freshAccount(credits)
    const response = await server.request<HookPage>(path, { key: account.key })
    const state = await ledgerState(server.db, account.accountId)
    return { response, state, account }
  }

  test.each([
    ["a full page (50 rows) costs 2", "/v1/hooks/search?q=tinselbrook", 50, 2],
    ["a partial page (20 rows) costs 1", "/v1/hooks/search?q=tinselbrook%20partial", 20, 1],
    ["a 26-row page costs 2", "/v1/hooks/search?q=tinselbrook%20twentysix", 26, 2],
    ["an empty page costs 0", "/v1/hooks/search?q=nothingmatchestinsel", 0, 0]
  ])("%s", async (_name, path, rows, cost) => {
    const { response, state } = await charges(path)
    expect(response.status).toBe(200)
    expect(response.body.data).toHaveLength(rows)
    expect(response.headers.get("x-credits-charged")).toBe(String(cost))
    expect(response.headers.get("x-credits-remaining")).toBe(String(100 - cost))
    expect(state).toMatchObject({ monthly: 100 - cost, journalMonthly: 100 - cost, pendingHolds: 0 })
  })

  test("a list page of 26 rows costs 2 and an empty category costs 0", async () => {
    await insert(Array.from({ length: 26 }, (_, i) => hook({ text: `Shelf ${i}`, category: "personal-finance-extra-26", published_at: day(i) })))
    await server.admin("/admin/catalog/categories", {
      method: "PUT",
      body: [
        { slug: "fitness", name: "Fitness" },
        { slug: "personal-finance", name: "Personal Finance" },
        { slug: "food-cooking", name: "Food & Cooking" },
        { slug: "empty-shelf", name: "An Empty Shelf" },
        { slug: "personal-finance-extra-26", name: "Twenty-six" }
      ]
    })
    const full = await charges("/v1/hooks/list?category=personal-finance-extra-26")
    expect(full.response.body.data).toHaveLength(26)
    expect(full.response.headers.get("x-credits-charged")).toBe("2")
    expect(full.state.monthly).toBe(98)
    const empty = await charges("/v1/hooks/list?category=empty-shelf")
    expect(empty.response.body).toEqual({ object: "list", data: [], has_more: false, next_cursor: null })
    expect(empty.response.headers.get("x-credits-charged")).toBe("0")
    expect(empty.response.headers.get("x-credits-remaining")).toBe("100")
  })

  test("the journal names the operation and the hold is settled", async () => {
    const { account } = await charges("/v1/hooks/search?q=tinselbrook")
    const { rows } = await server.db.query(
      "SELECT operation, status, settled_monthly::int FROM holds WHERE account_id = $1",
      [account.accountId]
    )
    expect(rows).toEqual([{ operation: "search", status: "settled", settled_monthly: 2 }])
  })

  test("with 1 credit, search and list answer 402 and change nothing; a hook (1 credit) still works", async () => {
    const account = await freshAccount(1)
    const hookRow = (await insert([hook({ text: "Pennyworth only" })]))[0]
    expectError(await search("tinselbrook", undefined, account), 402, "insufficient_credits")
    expectError(await list("fitness", undefined, account), 402, "insufficient_credits")
    expectError(await search("nothingmatchestinsel", undefined, account), 402, "insufficient_credits")
    expect(await ledgerState(server.db, account.accountId)).toMatchObject({ monthly: 1, journalMonthly: 1, pendingHolds: 0 })
    const got = await server.request(`/v1/hooks/${hookRow.id}`, { key: account.key })
    expect(got.status).toBe(200)
    expect(got.headers.get("x-credits-charged")).toBe("1")
    expect(got.headers.get("x-credits-remaining")).toBe("0")
    expectError(await server.request(`/v1/hooks/${hookRow.id}`, { key: account.key }), 402, "insufficient_credits")
  })

  test("top-up credits pay when the monthly balance is short", async () => {
    const account = await server.account({ plan: "enterprise", monthly_balance: 1, topup_balance: 5 })
    const response = await search("tinselbrook", undefined, account)
    expect(response.headers.get("x-credits-charged")).toBe("2")
    expect(response.headers.get("x-credits-remaining")).toBe("4")
    expect(await ledgerState(server.db, account.accountId)).toMatchObject({ monthly: 0, topup: 4, journalTopup: 4 })
  })
})

describe("GET /v1/hooks/{id}", () => {
  test("a hook with only the required fields has every other field present as null", async () => {
    const [bare] = await insert([hook({ text: "Bare hook", platform: "instagram" })])
    const account = await freshAccount(5)
    const response = await server.request(`/v1/hooks/${bare.id}`, { key: account.key })
    expect(response.status).toBe(200)
    expect(response.body).toEqual({
      id: bare.id,
      text: "Bare hook",
      platform: "instagram",
      media_type: null,
      thumbnail_url: null,
      category: null,
      hook_duration_sec: null,
      published_at: null,
      source_url: null,
      caption: null,
      duration_sec: null,
      summary: null,
      emotions: null,
      comment_themes: null,
      metrics: null,
      creator: null,
      audio: null
    })
    expect(response.headers.get("x-credits-charged")).toBe("1")
    expect(response.headers.get("x-credits-remaining")).toBe("4")
    expect(await ledgerState(server.db, account.accountId)).toMatchObject({ monthly: 4, journalMonthly: 4, pendingHolds: 0 })
  })

  test("a full hook returns every field in its documented shape", async () => {
    const full = hook({
      text: "The full hook",
      platform: "youtube",
      media_type: "video",
      thumbnail_url: "https://cdn.example/t.jpg",
      category: "fitness",
      hook_duration_sec: 2.5,
      published_at: "2025-06-01T12:30:45.123Z",
      source_url: "https://youtube.com/shorts/abc",
      caption: "Caption #fyp",
      duration_sec: 41.2,
      summary: "A summary.",
      emotions: { inspiration: 10, fear: 0, curiosity: 99.5, satisfaction: 50, happiness: 75, anger: 1, surprise: 100 },
      comment_themes: [{ word: "wow", count: 12 }, { word: "same", count: 3 }],
      metrics: { views: 1200, likes: 80, nested: { a: [1, 2] } },
      creator: { handle: "@someone", followers: 1000 },
      audio: "original sound"
    })
    await insert([full])
    const response = await server.request(`/v1/hooks/${full.id}`, { key })
    expect(response.status).toBe(200)
    expect(response.body).toEqual(full)
  })

  test("an unknown id is 404 and touches no wallet", async () => {
    const account = await freshAccount(0)
    expectError(await server.request("/v1/hooks/hook_0123456789abcdef0123456789abcdef", { key: account.key }), 404, "not_found")
    const { rows } = await server.db.query("SELECT count(*)::int AS n FROM credit_journal WHERE account_id = $1", [account.accountId])
    expect(rows[0].n).toBe(0)
  })

  test("search and list items are HookLean with published_at in UTC milliseconds", async () => {
    const [lean] = await insert([hook({
      text: "Leanfisher output",
      published_at: "2025-03-04T05:06:07.089Z",
      hook_duration_sec: 1.5,
      category: "fitness",
      summary: "not in lean"
    })])
    const response = await search("leanfisher")
    expect(response.body.data).toEqual([{
      id: lean.id,
      text: "Leanfisher output",
      platform: "tiktok",
      media_type: null,
      thumbnail_url: null,
      category: "fitness",
      hook_duration_sec: 1.5,
      published_at: "2025-03-04T05:06:07.089Z"
    }])
  })
})

describe("the search structures follow every write to hooks", () => {
  const consistent = async () => {
    const { rows } = await server.db.query(`
      SELECT
        (SELECT count(*) FROM hooks)::int AS hooks,
        (SELECT hooks FROM catalog_state)::int AS counted,
        (SELECT count(*) FROM hook_search s JOIN hooks h USING (id)
          WHERE s.doc = to_tsvector('english', h.text) AND s.folded = lower(h.text)
            AND s.category IS NOT DISTINCT FROM h.category
            AND s.sort_ms = COALESCE(floor(extract(epoch FROM h.published_at) * 1000)::bigint, -9000000000000000))::int AS indexed,
        (SELECT count(*) FROM (
          SELECT word, ndoc FROM ts_stat('SELECT doc FROM hook_search')
          EXCEPT SELECT lexeme, hooks FROM hook_search_terms WHERE hooks > 0) x)::int AS missing_terms,
        (SELECT count(*) FROM hook_search_terms WHERE hooks < 0)::int AS negative_terms,
        (SELECT count(*) FROM (
          SELECT t.lexeme, array_length(t.positions, 1), s.sort_ms, s.id FROM hook_search s, unnest(s.doc) t
          EXCEPT SELECT lexeme, occurrences, sort_ms, id FROM hook_search_postings) x)::int AS missing_postings,
        (SELECT count(*) FROM (
          SELECT lexeme, occurrences, sort_ms, id FROM hook_search_postings
          EXCEPT SELECT t.lexeme, array_length(t.positions, 1), s.sort_ms, s.id FROM hook_search s, unnest(s.doc) t) x)::int AS stale_postings`)
    const row = rows[0]
    expect(row).toEqual({
      hooks: row.hooks,
      counted: row.hooks,
      indexed: row.hooks,
      missing_terms: 0,
      negative_terms: 0,
      missing_postings: 0,
      stale_postings: 0
    })
  }

  test("after inserts, updates of text, date and category, deletes and re-inserts", async () => {
    await consistent()
    const [a, b] = await insert([
      hook({ text: "Stepwise stepwise check", published_at: day(1), category: "fitness" }),
      hook({ text: "Stepwise other", published_at: null })
    ])
    await consistent()
    const versionBefore = (await server.db.query("SELECT version FROM catalog_state")).rows[0].version
    await insert([{ ...a, text: "Now different words entirely", published_at: day(3), category: null }])
    await consistent()
    await server.db.query("UPDATE hooks SET text = 'Stepwise stepwise stepwise' WHERE id = $1", [b.id])
    await consistent()
    expect(ids(await search("stepwise"))).toEqual([b.id])
    await server.db.query("DELETE FROM hooks WHERE id = $1", [b.id])
    await consistent()
    expect(ids(await search("stepwise"))).toEqual([])
    await insert([b])
    await consistent()
    const versionAfter = (await server.db.query("SELECT version FROM catalog_state")).rows[0].version
    expect(Number(versionAfter)).toBeGreaterThan(Number(versionBefore))
  })

  // A later CREATE OR REPLACE of one of them drops its settings unless it repeats them.
  test("the catalog's read functions keep their settings: no parallel workers, no heap prefetch", async () => {
    const { rows } = await server.db.query<{ proname: string; proconfig: Array<string> }>(
      "SELECT proname, proconfig FROM pg_proc WHERE proname IN ('hook_search_page', 'hook_substring_page', 'hook_neighbours') ORDER BY proname"
    )
    expect(rows.map((row) => [row.proname, [...row.proconfig].sort()])).toEqual(
      ["hook_neighbours", "hook_search_page", "hook_substring_page"].map((name) => [name, ["effective_io_concurrency=0", "max_parallel_workers_per_gather=0"]])
    )
  })
})

describe("a search or list that runs too long", () => {
  test.each([
    ["search", "hook_search, hook_search_postings", "/v1/hooks/search?q=anything", "hook_search_page"],
    ["list", "hooks", "/v1/hooks/list?category=fitness", "FROM hooks"]
  ])("a %s is cancelled in the database, answered 503 and costs nothing", async (_kind, table, path, runningQuery) => {
    const slow = await startTestServer({ SEARCH_TIMEOUT: "300 millis" })
    // Own connections, each closed before the database is dropped.
    const blocker = new Pg.Client({ connectionString: slow.databaseUrl })
    const observer = new Pg.Client({ connectionString: slow.databaseUrl })
    await blocker.connect()
    await observer.connect()
    try {
      const account = await slow.account({ plan: "enterprise", monthly_balance: 10 })
      await slow.admin("/admin/catalog/categories", { method: "PUT", body: [{ slug: "fitness", name: "Fitness" }] })
      const wallet = async () =>
        (await observer.query(
          `SELECT w.monthly_balance::int AS monthly,
                  (SELECT sum(amount)::int FROM credit_journal WHERE account_id = $1) AS journal,
                  (SELECT count(*)::int FROM holds WHERE account_id = $1 AND status = 'pending') AS pending
             FROM wallets w WHERE account_id = $1`,
          [account.accountId]
        )).rows[0]
      // Holding an exclusive lock on the search table makes any search wait, deterministically.
      await blocker.query("BEGIN")
      await blocker.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
      const response = await slow.request(path, { key: account.key })
      expect(response.status).toBe(503)
      expect((response.body as ErrorBody).error.type).toBe("service_unavailable")
      expect(response.headers.get("x-credits-charged")).toBeNull()
      // The blocker sits idle in its transaction: only the cancelled statement could still be active.
      expect(await statementsRunning(observer, `%${runningQuery}%`)).toBe(0)
      await blocker.query("ROLLBACK")
      expect(await wallet()).toEqual({ monthly: 10, journal: 10, pending: 0 })
      expect((await slow.request(path, { key: account.key })).status).toBe(200)
    } finally {
      await blocker.end()
      await observer.end()
      await slow.close()
    }
  })
})

describe("page queries take turns (SEARCH_CONCURRENCY)", () => {
  /** A server whose page queries run one at a time, with the catalog locked by a connection of the test's own. */
  const oneAtATime = async (searchTimeout: string) => {
    const gated = await startTestServer({ SEARCH_CONCURRENCY: "1", SEARCH_TIMEOUT: searchTimeout, CATALOG_CACHE_ENTRIES: "0" })
    const blocker = new Pg.Client({ connectionString: gated.databaseUrl })
    await blocker.connect()
    await blocker.query("BEGIN")
    await blocker.query("LOCK TABLE hook_search, hook_search_postings IN ACCESS EXCLUSIVE MODE")
    const account = await gated.account({ plan: "enterprise", monthly_balance: 100 })
    const pendingHolds = async () => (await ledgerState(gated.db, account.accountId)).pendingHolds
    const searchesInDatabase = () => statementsRunning(gated.db, "%hook_search_page%")
    return {
      gated,
      account,
      pendingHolds,
      searchesInDatabase,
      release: () => blocker.query("ROLLBACK"),
      close: async () => {
        await blocker.end()
        await gated.close()
      }
    }
  }

  test("beyond it a search waits outside the database, in arrival order, and is answered once its turn comes", async () => {
    const setup = await oneAtATime("60 seconds")
    try {
      const answered: Array<string> = []
      const search = (q: string) =>
        setup.gated.request(`/v1/hooks/search?q=${q}`, { key: setup.account.key }).then((response) => {
          answered.push(q)
          return response
        })
      const first = search("turnone")
      await eventually("the first search waits for the locked catalog in the database", async () => (await setup.searchesInDatabase()) === 1)
      const second = search("turntwo")
      await eventually("the second search holds its credits", async () => (await setup.pendingHolds()) === 2)
      const third = search("turnthree")
      await eventually("the third search holds its credits", async () => (await setup.pendingHolds()) === 3)
      // Past their holds, both would be in the database within milliseconds if nothing held them back.
      for (let look = 0; look < 20; look++) {
        expect(await setup.searchesInDatabase()).toBe(1)
        await Bun.sleep(25)
      }
      await setup.release()
      const responses = await Promise.all([first, second, third])
      expect(responses.map((response) => response.status)).toEqual([200, 200, 200])
      expect(answered).toEqual(["turnone", "turntwo", "turnthree"])
      const state = await ledgerState(setup.gated.db, setup.account.accountId)
      expect(state.pendingHolds).toBe(0)
      expect(state.monthly).toBe(state.journalMonthly)
    } finally {
      await setup.close()
    }
  })

  test("the wait for a turn counts toward SEARCH_TIMEOUT: searches queued behind a stuck one are answered 503 by their deadline and cost nothing", async () => {
    const setup = await oneAtATime("1 second")
    try {
      const running = setup.gated.request("/v1/hooks/search?q=turnrunning", { key: setup.account.key })
      await eventually("the first search waits for the locked catalog in the database", async () => (await setup.searchesInDatabase()) === 1)
      const sent = performance.now()
      const queued = await Promise.all(["turnqueuedone", "turnqueuedtwo", "turnqueuedthree"].map((q) =>
        setup.gated.request(`/v1/hooks/search?q=${q}`, { key: setup.account.key })))
      // Had each waited for its turn and then had a second of its own, the last would answer after about three.
      expect(performance.now() - sent).toBeLessThan(2_500)
      for (const response of queued) {
        expectEnvelope(response, 503, "service_unavailable")
        expect(response.headers.get("x-credits-charged")).toBeNull()
      }
      expect((await running).status).toBe(503)
      await setup.release()
      const state = await ledgerState(setup.gated.db, setup.account.accountId)
      expect({ monthly: state.monthly, journal: state.journalMonthly, pending: state.pendingHolds }).toEqual({ monthly: 100, journal: 100, pending: 0 })
    } finally {
      await setup.close()
    }
  })
})
