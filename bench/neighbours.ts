/**
 * `bun bench/neighbours.ts`: how long the nearest-hooks query (hook_neighbours, the prediction's
 * similar_hooks and category) takes on the seeded bench catalog of 1,000,000 hooks
 * (BENCH_CATALOG_SIZE=100000 for the smaller one; bench/catalog.ts seeds and reuses it). The 52
 * hook lines of the category tests and one line of common words are ranked three times, 40 hooks
 * each, on one connection; the first round only warms the cache. Prints p50, p90, p99 and the
 * slowest, in milliseconds, of the query as the server sends it.
 */
import Pg from "pg"
import { neighboursSql } from "../src/Hooks/CatalogSql.js"
import { lexemesOf } from "../src/Hooks/EnglishLexemes.js"
import { neighbourBounds } from "../src/Hooks/NeighbourRule.js"
import { RANKED_CONSIDERED } from "../src/Predictions/HookNeighbours.js"
import { categoryLines } from "../test/support/categoryLines.js"
import { prepareCatalogDatabase } from "./catalog.js"

const count = Number(process.env.BENCH_CATALOG_SIZE ?? 1_000_000)
const walkWindow = 10_000
const lines = [
  ...categoryLines.map(([line]) => line),
  "I tried this every day for a week and I can't go back, watch this before you start, nobody tells you the truth"
]

const url = await prepareCatalogDatabase(count, (text) => console.error(text))
const client = new Pg.Client({ connectionString: url })
await client.connect()
const times: Array<number> = []
try {
  for (const round of [0, 1, 2]) {
    for (const line of lines) {
      const started = performance.now()
      await client.query(neighboursSql, [
        lexemesOf(line),
        RANKED_CONSIDERED,
        neighbourBounds.rareBudget,
        neighbourBounds.commonSample,
        walkWindow
      ])
      if (round > 0) times.push(performance.now() - started)
    }
  }
} finally {
  await client.end()
}
times.sort((a, b) => a - b)
const at = (share: number) => times[Math.min(times.length - 1, Math.floor(share * times.length))].toFixed(1)
console.log(
  `hook_neighbours on ${count.toLocaleString("en-US")} hooks, ${times.length} queries: ` +
    `p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, p99 ${at(0.99)} ms, slowest ${times[times.length - 1].toFixed(1)} ms`
)
