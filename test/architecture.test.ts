/**
 * Imports run one way. Between files of src/ there is no import circle, and between rooms
 * (src/<Room>/) none either: a room that another room depends on never imports it back. Files at
 * src/'s top level are either shared leaves (Errors.ts, Ids.ts…) or the composition (Api.ts, App.ts,
 * main.ts) and are not rooms.
 */
import { describe, expect, test } from "bun:test"
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize, relative } from "node:path"

const src = join(import.meta.dir, "..", "src")

const sourceFiles = (readdirSync(src, { recursive: true }) as Array<string>).filter((file) => file.endsWith(".ts"))

/** file (relative to src/) → the src/ files it imports (type-only imports included: they are arrows too). */
const imports = new Map(sourceFiles.map((file) => {
  const text = readFileSync(join(src, file), "utf8")
  const targets = [...text.matchAll(/from "(\.{1,2}\/[^"]+)"/g)].map(([, path]) =>
    normalize(join(dirname(file), path!)).replace(/\.js$/, ".ts")
  )
  return [file, targets.filter((target) => !relative(src, join(src, target)).startsWith(".."))] as const
}))

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

const roomOf = (file: string): string | null => (file.includes("/") ? file.split("/")[0]! : null)

describe("imports", () => {
  test("every relative import names a file of src/", () => {
    const missing = [...imports].flatMap(([file, targets]) => targets.filter((target) => !imports.has(target)).map((target) => `${file} → ${target}`))
    expect(missing).toEqual([])
  })

  test("no file imports itself back through others", () => {
    expect(circles(new Map([...imports].map(([file, targets]) => [file, new Set(targets)])))).toEqual([])
  })

  test("no room imports a room that depends on it", () => {
    const rooms = new Map<string, Set<string>>()
    for (const [file, targets] of imports) {
      const from = roomOf(file)
      if (from === null) continue
      for (const target of targets) {
        const to = roomOf(target)
        if (to === null || to === from) continue
        rooms.set(from, (rooms.get(from) ?? new Set()).add(to))
      }
    }
    expect(rooms.size).toBeGreaterThan(5)
    expect(circles(rooms)).toEqual([])
  })
})
