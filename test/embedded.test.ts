import { afterAll, afterEach, describe, expect, test } from "bun:test"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { embeddedEnvironment, freePort, startUntilBanner } from "./support/process.js"

const root = join(import.meta.dir, "..")
const bun = process.execPath
const dataDir = mkdtempSync(join(tmpdir(), "hookline-embedded-"))
afterAll(() => rmSync(dataDir, { recursive: true, force: true }))

const environment = (port: number) => embeddedEnvironment(dataDir, port, 200)

/** Every process a test started: whatever an assertion left running is stopped after it. */
const children: Array<ReturnType<typeof Bun.spawn>> = []
afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.exitCode !== null || child.signalCode !== null) continue
    child.kill("SIGKILL")
    await child.exited
  }
})

const start = async (port: number) => {
  const started = await startUntilBanner(environment(port))
  children.push(started.child)
  return started
}

const stop = async (child: ReturnType<typeof Bun.spawn>) => {
  child.kill("SIGTERM")
  return await child.exited
}

describe("embedded mode (no DATABASE_URL)", () => {
  test("starts with a demo account, prints a working curl line, restarts with its data, and refuses a second process", async () => {
    const port = freePort()
    const first = await start(port)
    const key = /demo API key:\s+(hkl_live_\S+)/.exec(first.output)?.[1]
    const adminToken = /admin token:\s+(\S+)/.exec(first.output)?.[1]
    expect(key).toBeDefined()
    expect(adminToken).toBeDefined()
    const curlLine = first.output.split("\n").find((line) => line.includes("/v1/wallet"))!
    expect(curlLine).toContain(`Authorization: Bearer ${key}`)
    const wallet = await fetch(`http://127.0.0.1:${port}/v1/wallet`, { headers: { authorization: `Bearer ${key}` } })
    expect(wallet.status).toBe(200)
    expect(await wallet.json()).toMatchObject({ object: "wallet", monthly_balance: 1_000, topup_balance: 0 })

    // The admin CLI talks to the running server (it holds the data directory).
    const accountId = /demo account:\s+(acct_\S+)/.exec(first.output)![1]
    const cli = Bun.spawnSync(
      [bun, "src/Admin/Cli.ts", "credits", "grant", accountId, "--bucket", "topup", "--amount", "7", "--reason", "welcome credit"],
      { cwd: root, env: environment(port) }
    )
    expect(cli.exitCode).toBe(0)
    expect(JSON.parse(cli.stdout.toString())).toMatchObject({ object: "wallet", topup_balance: 7 })
    // It says which server it used (on stderr: stdout is the answer).
    expect(cli.stderr.toString()).toContain(`using the server running at http://127.0.0.1:${port}`)

    // A second server on the same data directory refuses to start.
    const second = Bun.spawn([bun, "src/main.ts"], { cwd: root, env: environment(freePort()), stdout: "pipe", stderr: "pipe" })
    children.push(second)
    expect(await second.exited).not.toBe(0)
    expect(await new Response(second.stderr).text() + await new Response(second.stdout).text()).toContain("is held by process")

    expect(await stop(first.child)).toBe(0)

    const again = await start(port)
    expect(again.output).toContain(key!)
    const after = await fetch(`http://127.0.0.1:${port}/v1/wallet`, { headers: { authorization: `Bearer ${key}` } })
    expect(await after.json()).toMatchObject({ monthly_balance: 1_000, topup_balance: 7 })
    console.log(`embedded cold start: first ${first.startupMs} ms, restart ${again.startupMs} ms`)
    expect(await stop(again.child)).toBe(0)

    // With no server holding the directory, the CLI opens it itself; the grant's --reason is in the history.
    const direct = Bun.spawnSync([bun, "src/Admin/Cli.ts", "transactions", accountId, "--limit", "1"], { cwd: root, env: environment(port) })
    expect(direct.exitCode).toBe(0)
    expect(direct.stderr.toString()).toContain(`using the embedded database in ${dataDir}`)
    expect(JSON.parse(direct.stdout.toString()).data[0]).toMatchObject({
      type: "grant",
      amount: 7,
      balance_after: { topup: 7 },
      reason: "welcome credit",
      reference: { kind: "admin", id: null }
    })
  }, 120_000)
})
