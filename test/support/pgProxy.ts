/**
 * A TCP proxy between a Hookline server and PostgreSQL that cuts a connection at a chosen moment,
 * to test what a lost connection does to a write whose outcome the server cannot see.
 */
import { createServer, type Server, type Socket, connect } from "node:net"

type Mode = "pass" | "cutAfterCommit" | "cutBeforeCommit" | "holdCommit" | "cutReply" | "down"

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
  /** The connection `holdCommit` cut off from the server, still open to PostgreSQL, and the COMMIT it holds back. */
  let held: { readonly upstream: Socket; readonly commit: Buffer } | null = null
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
      if (mode === "holdCommit" && commitIsNext) {
        // The server loses its connection; PostgreSQL keeps the session, its transaction open.
        held = { upstream, commit: chunk }
        cuts++
        mode = after
        upstream.removeAllListeners("data")
        return void client.destroy()
      }
      if (mode === "cutReply" && chunk.includes(marker)) replyIsCut = true
      upstream.write(chunk)
    })
    upstream.on("data", (chunk: Buffer) => {
      // The statement ran (its ReadyForQuery came back): its answer never reaches the server.
      if (replyIsCut) return void (chunk.includes(readyForQuery) ? cut(client, upstream) : undefined)
      if ((mode === "cutBeforeCommit" || mode === "holdCommit") && chunk.includes(marker)) commitIsNext = true
      const at = mode === "cutAfterCommit" ? chunk.indexOf(commitComplete) : -1
      if (at === -1) return void client.write(chunk)
      client.write(chunk.subarray(0, at))
      cut(client, upstream)
    })
    for (const [one, other] of [[client, upstream], [upstream, client]] as const) {
      one.on("error", () => other.destroy())
      one.on("close", () => {
        open.delete(one)
        if (held?.upstream !== other) other.destroy()
      })
    }
  })
  const listen = () => new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port)))
  return {
    listen,
    /** Listens; answers the database's URL as reached through this proxy. */
    listenAsUrl: async () => {
      const proxied = new URL(target)
      proxied.hostname = "127.0.0.1"
      proxied.port = String(await listen())
      return proxied.toString()
    },
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
    /**
     * Cuts the connection at its next COMMIT (`at`; before it: the one after `marker` was returned), then stays `then`.
     * `holdCommit` cuts it before its COMMIT on the server's side only: PostgreSQL keeps the session and its transaction
     * open, holding its row locks, until `endHeld` sends the COMMIT on or closes the session.
     */
    arm: (at: "cutAfterCommit" | "cutBeforeCommit" | "holdCommit", then: "pass" | "down", answerKey = "") => {
      mode = at
      after = then
      marker = answerKey
    },
    /**
     * Ends the transaction `holdCommit` kept open: "commit" sends its COMMIT on (its answer reaches no one) and resolves
     * once PostgreSQL answered it; "rollback" closes the session (PostgreSQL rolls back when it reads the close) and resolves
     * once it is closed.
     */
    endHeld: (how: "commit" | "rollback") =>
      new Promise<void>((resolve, reject) => {
        const connection = held
        if (connection === null) return reject(new Error("no connection is held"))
        held = null
        connection.upstream.on("close", () => resolve())
        if (how === "rollback") return void connection.upstream.destroy()
        connection.upstream.on("data", (chunk: Buffer) => {
          if (chunk.includes(readyForQuery)) connection.upstream.destroy()
        })
        connection.upstream.write(connection.commit)
      }),
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
