/**
 * Temporary directories a test makes under the system's temp directory, removed once the tests
 * have run (also when an assertion failed before a test's own cleanup): bunfig.toml preloads
 * tempDirsCleanup.ts, whose global afterAll calls removeTempDirs. This file registers no hook
 * itself, so a helper process started by a test (stalledWorker.ts) may import it outside the
 * test runner.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const made = new Set<string>()

/** A new directory `<tmp>/<prefix>XXXXXX`, removed after the tests. */
export const tempDir = (prefix: string): string => {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  made.add(dir)
  return dir
}

/** Removes every directory made through tempDir so far. */
export const removeTempDirs = (): void => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true })
  made.clear()
}
