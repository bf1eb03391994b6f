/**
 * A TCP proxy between a Hookline server and PostgreSQL that cuts a connection at a chosen moment,
 * to test what a lost connection does to a write whose outcome the server cannot see.
 */
import { createServer, type Server, type Socket, connect } from "node:net"

type Mode = "pass" | "cutAfterCommit" | "cutBeforeCommit" | "cutReply" | "down"

/** PostgreSQL's ReadyForQuery when no transaction is open: 'Z', length 5, 'I'. */
const readyForQuery = Buffer.from([0x5a, 0, 0, 0, 5, 0x49])

/** PostgreSQL's CommandComplete for COMMIT: 'C', length 11, "COMMIT\0". */
const commitComplete = Buffer.from([0x43, 0, 0, 0, 11, ...Buffer.from("COMMIT"), 0])

/**
 * A TCP proxy to PostgreSQL that cuts one connection at its next COMMIT, then stays `then`. The
 * COMMIT a client sends is a prepared statement's name once the connection has run one, so
 * "before COMMIT" is told by what precedes it: the row the idempotency answer's UPDATE returns
 * (its key, `marker`), after which the transaction's next message is its COMMIT.
 */
export const pgProxy = (target: URL) => {
  let mode: Mode = "pass"
  let after: Mode = "pass"
  let marker = ""
  let cuts = 0
  const open = new Set<Socket>()
  const cutAll = () => {
    for (const socket of open) socket.destroy()
    open.clear()
  }
  const cut = (client: Socket, upstream: Socket) => {
    cuts++
    mode = after
    client.destroy()
    upstream.destroy()
    if (mode === "down") cutAll()
  }
  const server: Server = createServer((client) => {
    if (mode === "down") return void client.destroy()
    const upstream = connect(Number(target.port), target.hostname)
    open.add(client).add(upstream)
    let commitIsNext = false
    let replyIsCut = false
    client.on("data", (chunk: Buffer) => {
      if (mode === "cutBeforeCommit" && commitIsNext) return cut(client, upstream)
      if (mode === "cutReply" && chunk.includes(marker)) replyIsCut = true
      upstream.write(chunk)
    })
    upstream.on("data", (chunk: Buffer) => {
      // The statement ran (its ReadyForQuery came back): its answer never reaches the server.
      if (replyIsCut) return void (chunk.includes(readyForQuery) ? cut(client, upstream) : undefined)
      if (mode === "cutBeforeCommit" && chunk.includes(marker)) commitIsNext = true
      const at = mode === "cutAfterCommit" ? chunk.indexOf(commitComplete) : -1
      if (at === -1) return void client.write(chunk)
      client.write(chunk.subarray(0, at))
      cut(client, upstream)
    })
    for (const [one, other] of [[client, upstream], [upstream, client]] as const) {
      one.on("error", () => other.destroy())
      one.on("close", () => {
        open.delete(one)
        other.destroy()
      })
    }
  })
  return {
    listen: () => new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port))),
    /**
     * Lets the next statement whose text holds `fragment` run in PostgreSQL, then cuts its
     * connection before any of its answer reaches the server; then stays `then`. The text is
     * sent when a connection first prepares the statement: use it on a fresh server.
     */
    cutReplyTo: (fragment: string, then: "pass" | "down") => {
      mode = "cutReply"
      after = then
      marker = fragment
    },
    /** Cuts the connection at its next COMMIT (`at`; before it: the one after `marker` was returned), then stays `then`. */
    arm: (at: "cutAfterCommit" | "cutBeforeCommit", then: "pass" | "down", answerKey = "") => {
      mode = at
      after = then
      marker = answerKey
    },
    restore: () => {
      mode = "pass"
    },
    cuts: () => cuts,
    close: () =>
      new Promise<void>((resolve) => {
        cutAll()
        server.close(() => resolve())
      })
  }
}
