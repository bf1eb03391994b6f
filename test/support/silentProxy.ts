/**
 * A TCP proxy in front of a test's own server that can make the connections it carries go silent
 * (a network dropping their packets): the sockets stay open and nothing more passes either way,
 * while new connections are carried as usual. A connection in that state is what a client meets
 * after a network partition or a NAT forgetting it: its commands wait until the kernel gives up.
 */
import { connect, createServer, type Socket } from "node:net"

export interface SilentProxy {
  readonly port: number
  /** The connections open now go silent; later ones are carried. */
  readonly silenceOpenConnections: () => void
  readonly stop: () => Promise<void>
}

export const startSilentProxy = async (target: { readonly host: string; readonly port: number }): Promise<SilentProxy> => {
  const pairs = new Set<{ readonly client: Socket; readonly upstream: Socket; silent: boolean }>()
  const server = createServer((client) => {
    const upstream = connect({ host: target.host, port: target.port })
    const pair = { client, upstream, silent: false }
    pairs.add(pair)
    client.on("data", (chunk) => void (pair.silent || upstream.write(chunk)))
    upstream.on("data", (chunk) => void (pair.silent || client.write(chunk)))
    const close = () => {
      pairs.delete(pair)
      client.destroy()
      upstream.destroy()
    }
    for (const socket of [client, upstream]) {
      socket.on("error", close)
      socket.on("close", close)
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address()
  if (address === null || typeof address === "string") throw new Error("the proxy has no TCP address")
  return {
    port: address.port,
    silenceOpenConnections: () => {
      for (const pair of pairs) pair.silent = true
    },
    stop: async () => {
      for (const pair of pairs) {
        pair.client.destroy()
        pair.upstream.destroy()
      }
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
