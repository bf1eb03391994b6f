/**
 * A Hookline server in its own process whose scorer never finishes: the predictions tests start
 * it on their database, let it claim a job, and kill it with SIGKILL (a worker dying mid-job,
 * with no chance to hand the job back). Settings come as JSON in HOOKLINE_TEST_ENV; it prints
 * "ready" once it serves.
 */
import { Effect, Layer } from "effect"
import { ClipScorer } from "../../src/Predictions/Scorer.js"
import { startTestServer } from "./server.js"

const databaseUrl = process.env.HOOKLINE_TEST_DATABASE_URL
if (databaseUrl === undefined) throw new Error("HOOKLINE_TEST_DATABASE_URL is not set")
const env = JSON.parse(process.env.HOOKLINE_TEST_ENV ?? "{}") as Record<string, string>

const neverFinishes = Layer.succeed(ClipScorer, ClipScorer.of({ score: () => Effect.never }))
await startTestServer(env, { databaseUrl, scorer: neverFinishes })
process.stdout.write("ready\n")
setInterval(() => undefined, 60_000)
