/**
 * The embedded database's wire: each client connection of the sql-pg pool is an in-process
 * Duplex (sql-pg's `stream` option) whose protocol messages run on PGlite, with no socket between.
 *
 * PGlite is one backend session, so the connections share it, and a connection holds it from its
 * first message until a Sync or simple Query leaves the session idle (no transaction open). So an
 * extended-protocol batch (Parse/Bind/Execute/Sync) never interleaves with another connection's
 * messages, and a transaction keeps the session to itself until it ends. A queue that hands the
 * session over message by message lets one connection bind another's unnamed statement and read
 * its rows; a throw inside such a queue wedged it for good: that is why this is written here
 * rather than taken from @electric-sql/pglite-socket.
 *
 * - A failure inside PGlite fails that connection alone (the driver reports it as lost, the request
 *   answers 503); the session is cleaned (Sync, ROLLBACK) and handed to the next connection.
 * - PGlite runs a statement synchronously on this thread: nothing can stop one that has started
 *   (no statement_timeout, no cancel; a CancelRequest is read and dropped). What can be bounded is
 *   the wait between statements: a connection that holds the session (inside a transaction or a
 *   batch) and sends nothing for `idleLimitMs` is closed, its transaction rolled back.
 */
import type { PGlite } from "@electric-sql/pglite"
import { Duplex } from "node:stream"

/** Codes of the untyped first messages a client may send (the protocol's StartupMessage and its special requests). */
const protocolVersion3 = 196608
const sslRequest = 80877103
const gssEncRequest = 80877104

const code = (letter: string) => letter.charCodeAt(0)
/** Messages after which the server has answered ReadyForQuery: the end of a client's turn. */
const endsTurn = new Set([code("S"), code("Q")])
const terminate = code("X")

const typedMessage = (type: string, body: Buffer): Buffer => {
  const header = Buffer.alloc(5)
  header[0] = code(type)
  header.writeInt32BE(body.length + 4, 1)
  return Buffer.concat([header, body])
}
const syncMessage = typedMessage("S", Buffer.alloc(0))
const rollbackMessage = typedMessage("Q", Buffer.from("ROLLBACK\0"))

export interface EmbeddedSessionOptions {
  /** How long a connection may hold the session without sending anything before it is closed. */
  readonly idleLimitMs: number
  /** Told of every failure inside PGlite and of every connection closed for holding the session idle. */
  readonly onFailure: (reason: string, cause: unknown) => void
}

/** PGlite's one session, handed to one connection at a time in the order they asked. */
export class EmbeddedSession {
  private holder: SessionConnection | undefined
  private readonly waiting: Array<{ readonly connection: SessionConnection; readonly resume: (taken: boolean) => void }> = []

  constructor(readonly db: PGlite, readonly options: EmbeddedSessionOptions) {}

  /** Connections waiting for the session. */
  get waitingConnections(): number {
    return this.waiting.length
  }

  /** A new client connection: sql-pg's `stream` option. */
  readonly connect = (): Duplex => new SessionConnection(this)

  /** Resolves true once `connection` holds the session, false if it was closed while waiting. */
  take(connection: SessionConnection): Promise<boolean> {
    if (this.holder === connection) return Promise.resolve(true)
    if (this.holder === undefined) {
      this.holder = connection
      return Promise.resolve(true)
    }
    return new Promise((resume) => this.waiting.push({ connection, resume }))
  }

  give(connection: SessionConnection): void {
    if (this.holder !== connection) return
    const next = this.waiting.shift()
    this.holder = next?.connection
    next?.resume(true)
  }

  /** Runs client messages on PGlite and answers the backend's bytes. */
  run(messages: Uint8Array): Promise<Uint8Array> {
    return this.db.runExclusive(() => this.db.execProtocolRaw(messages))
  }

  /**
   * A connection going away: out of the queue, or, if it holds the session, the session left clean
   * (its batch ended with a Sync, its transaction rolled back) and handed on.
   */
  async leave(connection: SessionConnection): Promise<void> {
    const queued = this.waiting.findIndex((entry) => entry.connection === connection)
    if (queued !== -1) this.waiting.splice(queued, 1)[0].resume(false)
    if (this.holder !== connection) return
    try {
      // Runs after any batch of its still running (PGlite's own lock). A Sync ends a batch left
      // half-sent and is a no-op otherwise.
      await this.run(syncMessage)
      if (this.db.isInTransaction()) await this.run(rollbackMessage)
    } catch (cause) {
      this.options.onFailure("the embedded database could not be cleaned after a connection closed", cause)
    } finally {
      this.give(connection)
    }
  }
}

/** One client connection: frames the client's messages and runs them on the session in turns. */
class SessionConnection extends Duplex {
  private incoming: Buffer = Buffer.alloc(0)
  private readonly messages: Array<Buffer> = []
  private started = false
  private pumping = false
  /** Whether it holds the session in the middle of a turn (messages run, no Sync or Query yet). */
  private midTurn = false
  private idleTimer: ReturnType<typeof setTimeout> | undefined

  constructor(private readonly session: EmbeddedSession) {
    super()
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.incoming = this.incoming.length === 0 ? chunk : Buffer.concat([this.incoming, chunk])
    this.frame()
    callback()
    void this.pump()
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.clearIdleTimer()
    this.session.leave(this).then(() => callback(error), () => callback(error))
  }

  /** The client ended its side: the connection is over. */
  override _final(callback: (error?: Error | null) => void): void {
    this.push(null)
    callback()
    this.destroy()
  }

  /** Moves every complete message from `incoming` to `messages`. */
  private frame(): void {
    let offset = 0
    for (;;) {
      // Until the StartupMessage, messages are untyped (length, then a code): SSLRequest and friends.
      const header = this.started ? 5 : 8
      if (this.incoming.length - offset < header) break
      const length = this.started ? 1 + this.incoming.readInt32BE(offset + 1) : this.incoming.readInt32BE(offset)
      if (length < header - 1 || this.incoming.length - offset < length) break
      const message = this.incoming.subarray(offset, offset + length)
      if (!this.started) this.started = message.readInt32BE(4) === protocolVersion3
      this.messages.push(message)
      offset += length
    }
    if (offset > 0) this.incoming = this.incoming.subarray(offset)
  }

  private async pump(): Promise<void> {
    if (this.pumping) return
    this.pumping = true
    try {
      while (this.messages.length > 0 && !this.destroyed) {
        if (!(await this.session.take(this))) return
        this.clearIdleTimer()
        const batch = this.messages.splice(0)
        if (!(await this.runTurn(batch)) || this.destroyed) return
        if (this.midTurn || this.session.db.isInTransaction()) this.armIdleTimer()
        else this.session.give(this)
      }
    } catch (cause) {
      this.session.options.onFailure("the embedded database failed a statement; its connection is closed", cause)
      this.destroy(cause instanceof Error ? cause : new Error(String(cause)))
    } finally {
      this.pumping = false
    }
  }

  /** Runs `batch` (this connection holds the session); false once the connection has ended. */
  private async runTurn(batch: Array<Buffer>): Promise<boolean> {
    const first = batch[0]
    if (first[0] === 0) {
      // An untyped message: StartupMessage (answered with ReadyForQuery, so not mid-turn), else an
      // SSLRequest or GSSENCRequest ("not supported": go on in plain text) or a CancelRequest
      // (nothing can be cancelled: the connection just ends).
      const request = first.readInt32BE(4)
      if (request === protocolVersion3) this.answer(await this.session.run(first))
      else if (request === sslRequest || request === gssEncRequest) this.answer(Buffer.from("N"))
      else return this.finish()
      this.midTurn = false
      return batch.length === 1 || this.runTurn(batch.slice(1))
    }
    const ending = batch.findIndex((message) => message[0] === terminate)
    const messages = ending === -1 ? batch : batch.slice(0, ending)
    if (messages.length > 0) {
      const reply = await this.session.run(messages.length === 1 ? messages[0] : Buffer.concat(messages))
      this.midTurn = !endsTurn.has(messages[messages.length - 1][0])
      this.answer(reply)
    }
    return ending === -1 || this.finish()
  }

  private answer(reply: Uint8Array): void {
    if (reply.length > 0 && !this.destroyed) this.push(reply)
  }

  /** Ends the connection (Terminate, or a request that wants no session); always false. */
  private finish(): false {
    this.push(null)
    this.destroy()
    return false
  }

  private armIdleTimer(): void {
    this.idleTimer = setTimeout(() => {
      this.session.options.onFailure(
        `a connection held the embedded database for ${this.session.options.idleLimitMs} ms without a statement; it is closed and its transaction rolled back`,
        undefined
      )
      this.destroy(new Error("held the embedded database idle for too long"))
    }, this.session.options.idleLimitMs)
  }

  private clearIdleTimer(): void {
    if (this.idleTimer !== undefined) clearTimeout(this.idleTimer)
    this.idleTimer = undefined
  }
}
