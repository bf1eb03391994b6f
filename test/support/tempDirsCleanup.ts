/** Preloaded by bunfig.toml for the test runner: every directory made through tempDir goes after the run. */
import { afterAll } from "bun:test"
import { removeTempDirs } from "./tempDirs.js"

afterAll(removeTempDirs)
