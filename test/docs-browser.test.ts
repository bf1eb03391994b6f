/**
 * The /docs page in a real, headless Chromium: the reference lists every route of the
 * contract, and its "Try it out" form, authorized with a key, calls GET /v1/wallet.
 *
 * Needs Debian's chromium at /usr/bin/chromium or CHROMIUM_PATH (`.ci/run` installs it). Where
 * it is absent the test is skipped with a message saying so, except in CI (CI set), where it
 * fails: CI must never pass without having run it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { type OpenApiDocument, startTestServer, type TestServer, type WalletBody } from "./support/server.js"

const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"

/** Every route of the contract plus the upload PUT. */
const contractRoutes = [
  "GET /v1/wallet",
  "GET /v1/hooks/categories",
  "GET /v1/hooks/search",
  "GET /v1/hooks/list",
  "GET /v1/hooks/{id}",
  "POST /v1/predict/upload",
  "POST /v1/predict",
  "GET /v1/predict/{id}",
  "GET /v1/webhooks",
  "PUT /v1/webhooks",
  "DELETE /v1/webhooks",
  "POST /v1/webhooks/rotate",
  "POST /v1/webhooks/test",
  "PUT /uploads/{token}"
]

const haveChromium = existsSync(chromiumPath)
const missingChromium = `No Chromium at ${chromiumPath}: apt-get install chromium, or set CHROMIUM_PATH.`
if (!haveChromium && process.env.CI === undefined) console.warn(`docs-browser.test.ts: skipped. ${missingChromium}`)

describe.skipIf(!haveChromium && process.env.CI === undefined)("/docs in a browser", () => {
  let server: TestServer
  let profile: string
  let context: BrowserContext
  let page: Page
  let account: { accountId: string; key: string }
  /** Every request the page tried to send anywhere but the server (each is aborted). */
  const leftTheServer: Array<string> = []

  beforeAll(async () => {
    if (!haveChromium) throw new Error(missingChromium)
    server = await startTestServer()
    account = await server.account({ plan: "pro", monthly_balance: 250, topup_balance: 40 })
    profile = mkdtempSync(join(tmpdir(), "hookline-chromium-"))
    context = await chromium.launchPersistentContext(profile, {
      executablePath: chromiumPath,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync"
      ]
    })
    page = context.pages()[0] ?? (await context.newPage())
    // The page must work offline: any request that leaves the server is a failure.
    await page.route((url) => !url.href.startsWith(server.url), (route) => {
      leftTheServer.push(route.request().url())
      return route.abort()
    })
    await page.goto(`${server.url}/docs`)
    await page.locator(".opblock").first().waitFor()
  })

  afterAll(async () => {
    await context?.close()
    if (profile !== undefined) rmSync(profile, { recursive: true, force: true })
    await server?.close()
  })

  test("lists every route of the contract, and every route of /openapi.json", async () => {
    const listed = await page.locator(".opblock").evaluateAll((blocks) =>
      blocks.map((block) => {
        const method = block.querySelector(".opblock-summary-method")?.textContent?.trim() ?? ""
        const path = block.querySelector(".opblock-summary-path")?.getAttribute("data-path") ?? ""
        return `${method.toUpperCase()} ${path}`
      })
    )
    for (const route of contractRoutes) expect(listed).toContain(route)

    const spec = (await (await fetch(`${server.url}/openapi.json`)).json()) as OpenApiDocument
    const documented = Object.entries(spec.paths).flatMap(([path, operations]) =>
      Object.keys(operations).map((method) => `${method.toUpperCase()} ${path}`)
    )
    expect(listed.toSorted()).toEqual(documented.toSorted())
    await expect(page.title()).resolves.toBe("Hookline API Documentation")
  })

  test("Authorize with a key, then Try it out → Execute calls GET /v1/wallet and shows the wallet", async () => {
    await page.locator("button.authorize").first().click()
    const dialog = page.locator(".auth-container").filter({ hasText: "bearer (http, Bearer)" })
    await dialog.locator("input").fill(account.key)
    await dialog.locator("button.authorize").click()
    await expect(dialog.textContent()).resolves.toContain("Authorized")
    await dialog.locator("button.btn-done").click()

    const operation = page.locator(".opblock-get").filter({ has: page.locator('[data-path="/v1/wallet"]') })
    await operation.locator(".opblock-summary").click()
    await operation.locator("button.try-out__btn").click()
    const [response] = await Promise.all([
      page.waitForResponse((candidate) => new URL(candidate.url()).pathname === "/v1/wallet"),
      operation.locator("button.execute").click()
    ])

    expect(response.status()).toBe(200)
    expect(response.request().headers()["authorization"]).toBe(`Bearer ${account.key}`)
    const wallet: WalletBody = await response.json()
    expect(wallet).toMatchObject({ object: "wallet", monthly_balance: 250, topup_balance: 40 })

    // What the reader sees: the live response's status and body on the page.
    const live = operation.locator(".live-responses-table .response")
    await expect(live.locator(".response-col_status").first().textContent()).resolves.toContain("200")
    const shownBody = await live.locator(".response-col_description pre").first().textContent()
    expect(JSON.parse(shownBody ?? "null")).toEqual(wallet)
  })

  test("the page, loaded and used, sent nothing anywhere but the server (no CDN, no online validator)", () => {
    expect(leftTheServer).toEqual([])
  })
})
