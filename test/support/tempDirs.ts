/**
 * Temporary directories a test makes under the system's temp directory. bunfig.toml preloads
 * this file, so its afterAll is global: every directory made through tempDir is removed once the
 * tests have run, also when an assertion failed before a test's own cleanup.
 */
import { afterAll } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const made = new Set<string>()
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true })
  made.clear()
})

/** A new directory `<tmp>/<prefix>XXXXXX`, removed after the tests. */
export const tempDir = (prefix: string): string => {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  made.add(dir)
  return dir
}
