/**
 * The house rule: no file in src/ over 300 lines, no function over 80. Prints each
 * offender and exits 1 when there is one; `.ci/run` runs it before the tests.
 *
 *   bun scripts/sizes.ts
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import ts from "typescript"

const maxFileLines = 300
const maxFunctionLines = 80
const root = join(import.meta.dir, "..")

const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith(".ts") ? [path] : []
  })

const isFunction = (node: ts.Node): node is ts.FunctionLikeDeclaration =>
  ts.isFunctionDeclaration(node) || ts.isFunctionExpression(node) || ts.isArrowFunction(node) || ts.isMethodDeclaration(node)

const offenders: Array<string> = []
for (const path of sourceFiles(join(root, "src"))) {
  const text = readFileSync(path, "utf8")
  const name = relative(root, path)
  const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0)
  if (lines > maxFileLines) offenders.push(`${name}: ${lines} lines (at most ${maxFileLines})`)
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true)
  const visit = (node: ts.Node) => {
    if (isFunction(node) && node.body !== undefined) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line
      if (end - start + 1 > maxFunctionLines) {
        offenders.push(`${name}:${start + 1}: a function of ${end - start + 1} lines (at most ${maxFunctionLines})`)
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
}

if (offenders.length > 0) {
  console.error(offenders.join("\n"))
  process.exit(1)
}
console.log(`sizes: every file in src/ has at most ${maxFileLines} lines and every function at most ${maxFunctionLines}`)
