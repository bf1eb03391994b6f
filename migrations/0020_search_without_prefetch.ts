import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * The catalog's read functions run with `effective_io_concurrency = 0`: their bitmap heap scans
 * no longer ask the kernel to prefetch each heap page they are about to read.
 *
 * PostgreSQL's default (1) makes a bitmap heap scan call `posix_fadvise(WILLNEED)` for every page
 * ahead of reading it, which pays off when the pages are on a disk. A catalog is meant to be in
 * memory (docs/deployment.md): its pages are in the buffer cache or the kernel's page cache, and
 * the advice is a system call and a page-cache lookup that bring nothing. On the benchmark's cold
 * mix (1,000,000 hooks, 2 cores, `shared_buffers` 128 MB) a system-wide profile put 15 % of the
 * search function's samples (8 % of PostgreSQL's) in that advice. Set on the function, the setting
 * holds for everything it calls (the substring fallback included) and for nothing else.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    ALTER FUNCTION hook_search_page(text, real, bigint, text, integer, integer) SET effective_io_concurrency = 0;
    ALTER FUNCTION hook_substring_page(text, bigint, text, integer, integer) SET effective_io_concurrency = 0;
    ALTER FUNCTION hook_neighbours(text[], integer, integer, integer, integer) SET effective_io_concurrency = 0;
  `)
})
