/**
 * Imports run one way. Between files of src/ there is no import circle, and between rooms
 * (src/<Room>/) none either: a room that another room depends on never imports it back. Files at
 * src/'s top level are either shared leaves (Errors.ts, Ids.ts…) or the composition (Api.ts, App.ts,
 * main.ts); each counts as a room of its own, so a circle that passes through one is found too.
 * Every import form is read: `from "…"` and `from '…'`, side-effect imports (`import "…"`),
 * `export … from`, and `import("…")` with a literal path. And every service's shape is written
 * out as an interface, never inferred from its constructor (`Effect.Success<typeof make>`), which
 * would hand its callers its configuration and helpers too.
 */
import { describe, expect, test } from "bun:test"
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize, relative } from "node:path"

const src = join(import.meta.dir, "..", "src")

const allFiles = (readdirSync(src, { recursive: true, withFileTypes: true }))
  .filter((entry) => entry.isFile())
  .map((entry) => relative(src, join(entry.parentPath, entry.name)))
const sourceFiles = allFiles.filter((file) => file.endsWith(".ts"))

/**
 * The relative paths a source text imports, in every form: `… from "x"` (also `export … from`),
 * `import "x"` (side effect only), `import("x")`; with either quote or a backtick literal.
 */
export const importedPaths = (text: string): Array<string> =>
  [...text.matchAll(/(?:\bfrom|\bimport)\s*\(?\s*(["'`])(\.{1,2}\/[^"'`$]+)\1/g)].map(([, , path]) => path!)

/**
 * file (relative to src/) → the src/ files it imports (type-only imports included: they are
 * arrows too), from each file's text.
 */
const importGraph = (texts: ReadonlyMap<string, string>): Map<string, Array<string>> =>
  new Map([...texts].map(([file, text]) => {
    const targets = importedPaths(text).map((path) => normalize(join(dirname(file), path)).replace(/\.js$/, ".ts"))
    return [file, targets.filter((target) => !relative(src, join(src, target)).startsWith(".."))] as const
  }))

const imports = importGraph(new Map(sourceFiles.map((file) => [file, readFileSync(join(src, file), "utf8")])))

/** The strongly connected components with more than one member (Tarjan). */
const circles = (edges: ReadonlyMap<string, ReadonlySet<string>>): Array<Array<string>> => {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const found: Array<Array<string>> = []
  const visit = (node: string) => {
    index.set(node, index.size)
    low.set(node, index.get(node)!)
    stack.push(node)
    for (const next of edges.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next)
        low.set(node, Math.min(low.get(node)!, low.get(next)!))
      } else if (stack.includes(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!))
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: Array<string> = []
      let member: string
      do {
        member = stack.pop()!
        component.push(member)
      } while (member !== node)
      if (component.length > 1) found.push(component.sort())
    }
  }
  for (const node of edges.keys()) if (!index.has(node)) visit(node)
  return found
}

/**
 * The contract: every room's handlers are written against the whole HttpApi (HttpApiBuilder.group
 * takes it) and the typed client is derived from it, so arrows into these two are not a room's
 * dependency; they import only rooms' API definitions (Api.ts, ApiErrors.ts; checked below).
 */
const contract = new Set(["Api.ts", "client.ts"])

/** Entry points: they start the whole app (the admin CLI runs it in-process), no room depends on them. */
const entryPoints = new Set(["main.ts", "Admin/Cli.ts"])

/** A file's room: its folder under src/, or for a top-level file the file itself. */
const roomOf = (file: string): string => (file.includes("/") ? file.split("/")[0]! : file)

/** Room → the rooms its files import (entry points and arrows into the contract left out). */
const roomGraph = (files: ReadonlyMap<string, ReadonlyArray<string>>): Map<string, Set<string>> => {
  const rooms = new Map<string, Set<string>>()
  for (const [file, targets] of files) {
    if (entryPoints.has(file)) continue
    const from = roomOf(file)
    for (const target of targets) {
      const to = roomOf(target)
      if (to === from || contract.has(target)) continue
      rooms.set(from, (rooms.get(from) ?? new Set()).add(to))
    }
  }
  return rooms
}

const fileGraph = (files: ReadonlyMap<string, ReadonlyArray<string>>) => new Map([...files].map(([file, targets]) => [file, new Set(targets)]))

describe("the checker, on crafted sources", () => {
  test("a file circle made of a single-quoted side-effect import, a dynamic import and an export-from is found", () => {
    const crafted = importGraph(
      new Map([
        ["Wallet/Charge.ts", `import '../Shared.js'`],
        ["Shared.ts", `const later = () => import("./Wallet/Refund.js")`],
        ["Wallet/Refund.ts", `export { charge } from './Charge.js'`],
        ["Wallet/Leaf.ts", `import { Effect } from "effect"`]
      ])
    )
    expect(circles(fileGraph(crafted))).toEqual([["Shared.ts", "Wallet/Charge.ts", "Wallet/Refund.ts"]])
  })

  test("a room circle through a top-level file is found, and a one-way graph passes", () => {
    const circle = importGraph(
      new Map([
        ["Admin/Accounts.ts", `import { banner } from "../Banner.js"`],
        ["Banner.ts", `import { demo } from './Demo.js'`],
        ["Demo.ts", `import type { Plan } from "./Admin/Plans.js"`],
        ["Admin/Plans.ts", ""]
      ])
    )
    expect(circles(fileGraph(circle))).toEqual([])
    expect(circles(roomGraph(circle))).toEqual([["Admin", "Banner.ts", "Demo.ts"]])

    const oneWay = importGraph(new Map([["Admin/Accounts.ts", `import "../Banner.js"`], ["Banner.ts", `import "./Ids.js"`], ["Ids.ts", ""]]))
    expect(circles(roomGraph(oneWay))).toEqual([])
  })
})

describe("imports", () => {
  test("every import form is read", () => {
    const text = [
      `import { a } from "./a.js"`,
      `import type { B } from '../b.js'`,
      `import "./side-effect.js"`,
      `import './single-side.js'`,
      `export * from "./re-export.js"`,
      `export { c } from './re-export-single.js'`,
      `const d = await import("./dynamic.js")`,
      "const e = await import(`./template.js`)",
      `import {\n  f,\n  g\n} from "./multi-line.js"`,
      "const h = await import(`./${computed}.js`)",
      `import { Effect } from "effect"`
    ].join("\n")
    expect(importedPaths(text)).toEqual([
      "./a.js",
      "../b.js",
      "./side-effect.js",
      "./single-side.js",
      "./re-export.js",
      "./re-export-single.js",
      "./dynamic.js",
      "./template.js",
      "./multi-line.js"
    ])
  })

  test("every file of src/ is read, top-level files included", () => {
    // A source of another kind (.tsx, .mts, .js) would escape the checks below.
    expect(allFiles.filter((file) => !file.endsWith(".ts"))).toEqual([])
    expect(imports.has("main.ts")).toBe(true)
    expect(imports.has("Errors.ts")).toBe(true)
    expect(imports.size).toBe(sourceFiles.length)
    expect([...imports.values()].flat().length).toBeGreaterThan(sourceFiles.length)
  })

  test("every relative import names a file of src/", () => {
    const missing = [...imports].flatMap(([file, targets]) => targets.filter((target) => !imports.has(target)).map((target) => `${file} → ${target}`))
    expect(missing).toEqual([])
  })

  test("no file imports itself back through others", () => {
    expect(circles(fileGraph(imports))).toEqual([])
  })

  test("no room imports a room that depends on it", () => {
    const rooms = roomGraph(imports)
    expect(rooms.size).toBeGreaterThan(5)
    expect(circles(rooms)).toEqual([])
  })

  test("the contract files import only rooms' API definitions and each other", () => {
    const importers = (file: string) => [...imports].filter(([, targets]) => targets.includes(file)).map(([importer]) => importer)
    expect([...entryPoints].flatMap(importers)).toEqual([])
    const reached = [...contract].flatMap((file) => imports.get(file)!)
    expect(reached.length).toBeGreaterThan(5)
    expect(reached.filter((target) => !contract.has(target) && !/^[A-Za-z]+\/Api(Errors)?\.ts$/.test(target) && target.includes("/"))).toEqual([])
  })
})

/**
 * The shape each service offers, as its `Context.Service<Self, Shape>()` declaration names it
 * (the declaration may span lines): file → shape text.
 */
export const serviceShapes = (texts: ReadonlyMap<string, string>): Array<{ file: string; shape: string }> =>
  [...texts].flatMap(([file, text]) =>
    [...text.matchAll(/Context\.Service<\s*[\w.]+\s*,\s*([\s\S]*?)>\(\)/g)].map(([, shape]) => ({ file, shape: shape!.replace(/\s+/g, " ").trim() }))
  )

/** A shape inferred from code (`Effect.Success<typeof make>`, `ReturnType<typeof …>`) instead of written out. */
const inferred = (shape: string) => /\btypeof\b/.test(shape)

describe("service shapes", () => {
  test("the checker reads a declaration over several lines and tells an inferred shape from a written one", () => {
    const shapes = serviceShapes(new Map([
      ["Wallet/Repo.ts", "export class WalletRepo extends Context.Service<\n  WalletRepo,\n  Effect.Success<typeof make>\n>()(\"hookline/WalletRepo\") {}"],
      ["Wallet/Wallet.ts", "export class Wallet extends Context.Service<Wallet, WalletService>()(\"hookline/Wallet\") {}"]
    ]))
    expect(shapes).toEqual([
      { file: "Wallet/Repo.ts", shape: "Effect.Success<typeof make>" },
      { file: "Wallet/Wallet.ts", shape: "WalletService" }
    ])
    expect(shapes.filter(({ shape }) => inferred(shape)).map(({ file }) => file)).toEqual(["Wallet/Repo.ts"])
  })

  test("every service of src/ has its shape written out, not inferred from its make", () => {
    const shapes = serviceShapes(new Map(sourceFiles.map((file) => [file, readFileSync(join(src, file), "utf8")])))
    expect(shapes.length).toBeGreaterThan(30)
    expect(shapes.filter(({ shape }) => inferred(shape))).toEqual([])
  })
})
