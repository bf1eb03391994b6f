/** One hook in a test server's catalog, for tests that read or pay for a hook. */
import { expect } from "bun:test"
import type { HookPage, TestServer } from "./server.js"

/**
 * Imports one TikTok hook through the admin import, then answers its id as a search for `word`
 * (a word of its text that no other hook holds) finds it with a new reader's key.
 */
export const importOneHook = async (
  server: TestServer,
  hook: { readonly text: string; readonly source_url: string },
  word: string
): Promise<string> => {
  const imported = await server.admin("/admin/catalog/hooks", {
    method: "POST",
    rawBody: JSON.stringify({ ...hook, platform: "tiktok" }),
    headers: { "content-type": "application/x-ndjson" }
  })
  expect(imported.status).toBe(200)
  const reader = await server.account({ plan: "pro", monthly_balance: 10 })
  const page = await server.request<HookPage>(`/v1/hooks/search?q=${encodeURIComponent(word)}`, { key: reader.key })
  return page.body.data[0].id
}
