/**
 * Requests from a chosen client address: any 127.x address reaches a loopback server, so a test
 * can be two clients (or a proxy and a stranger) by binding its connection to 127.0.0.1 or 127.0.0.2.
 */
import { connect } from "node:net"

/** One GET over a connection bound to `localAddress`; the answer as the other tests' `Response` shapes it. */
export const answerFrom = (
  localAddress: string,
  url: string,
  path: string,
  headers: Record<string, string>
): Promise<{ status: number; headers: Headers; body: unknown }> =>
  new Promise((resolve, reject) => {
    const { hostname, port } = new URL(url)
    const socket = connect({ host: hostname, port: Number(port), localAddress }, () => {
      const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")
      socket.write(`GET ${path} HTTP/1.1\r\nhost: ${hostname}\r\nconnection: close\r\n${lines}\r\n`)
    })
    let received = ""
    socket.on("data", (chunk) => (received += chunk.toString("latin1")))
    socket.on("error", reject)
    socket.on("close", () => {
      const [head = "", ...rest] = received.split("\r\n\r\n")
      const [statusLine = "", ...fields] = head.split("\r\n")
      const status = /^HTTP\/1\.1 (\d{3})/.exec(statusLine)
      if (status === null) return reject(new Error(`no HTTP answer: ${received.slice(0, 80)}`))
      const answerHeaders = new Headers(fields.map((field) => {
        const colon = field.indexOf(":")
        return [field.slice(0, colon).trim(), field.slice(colon + 1).trim()] as [string, string]
      }))
      let text = rest.join("\r\n\r\n")
      if (answerHeaders.get("transfer-encoding") === "chunked") {
        let decoded = ""
        for (let at = 0; ;) {
          const end = text.indexOf("\r\n", at)
          const size = parseInt(text.slice(at, end), 16)
          if (!(size > 0)) break
          decoded += text.slice(end + 2, end + 2 + size)
          at = end + 2 + size + 2
        }
        text = decoded
      }
      let body: unknown = text
      try {
        body = text === "" ? null : JSON.parse(text)
      } catch {
        // not JSON: keep the text
      }
      resolve({ status: Number(status[1]), headers: answerHeaders, body })
    })
  })

/** The status of one GET from `localAddress`. */
export const requestFrom = async (localAddress: string, url: string, path: string, headers: Record<string, string>): Promise<number> =>
  (await answerFrom(localAddress, url, path, headers)).status
