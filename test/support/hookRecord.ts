/** Hook records for tests that write the catalog. */
import type { HookRecord } from "../../src/Hooks/HookRecord.js"

/** A TikTok hook with nothing set but its id and text, then `fields` over it. */
export const hookRecord = (id: string, text: string, fields: Partial<HookRecord> = {}): HookRecord => ({
  id,
  text,
  platform: "tiktok",
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
  audio: null,
  ...fields
})
