/**
 * A real webhook receiver for tests: Bun.serve on loopback, recording every request and the
 * status it answered. It answers 200 unless told otherwise: a fixed status, N failures first,
 * or hanging (no answer) to exercise timeouts.
 */

export interface ReceivedRequest {
  readonly method: string
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
  /** Milliseconds since the epoch when the request arrived. */
  readonly receivedAt: number
  /** The status this receiver answered with (null: it hung). */
  readonly answered: number | null
}

export interface Receiver {
  /** The receiver's URL, e.g. http://127.0.0.1:PORT/hooks. */
  readonly url: string
  readonly port: number
  readonly requests: ReadonlyArray<ReceivedRequest>
  /** Answer every later request with `status`. */
  readonly answer: (status: number) => void
  /** Answer the next `count` requests with `status` (default 500), then as before. */
  readonly failNext: (count: number, status?: number) => void
  /** Answer the next requests as scripted, one entry each ("hang": no answer), then as before. */
  readonly script: (answers: ReadonlyArray<number | "hang">) => void
  /** Leave later requests unanswered (true) until told otherwise. */
  readonly hang: (on: boolean) => void
  /** Send these headers with every later answer (e.g. Retry-After). */
  readonly headers: (next: Record<string, string>) => void
  /** Only answer after `ms` milliseconds (a slow receiver). */
  readonly delay: (ms: number) => void
  readonly clear: () => void
  readonly stop: () => Promise<void>
}

export const startReceiver = (path = "/hooks"): Receiver => {
  const requests: Array<ReceivedRequest> = []
  let status = 200
  let scripted: Array<number | "hang"> = []
  let hanging = false
  let delayMs = 0
  let extraHeaders: Record<string, string> = {}
  const hung: Array<() => void> = []

  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (request) => {
      const receivedAt = Date.now()
      const body = await request.text()
      const headers = Object.fromEntries(request.headers.entries())
      const url = new URL(request.url)
      const next = scripted.shift() ?? (hanging ? "hang" : status)
      if (next === "hang") {
        requests.push({ method: request.method, path: url.pathname, headers, body, receivedAt, answered: null })
        await new Promise<void>((resolve) => hung.push(resolve))
        return new Response("released", { status: 503 })
      }
      const answered = next
      requests.push({ method: request.method, path: url.pathname, headers, body, receivedAt, answered })
      if (delayMs > 0) await Bun.sleep(delayMs)
      return new Response(answered >= 300 && answered < 400 ? null : "ok", {
        status: answered,
        // A redirect back to this receiver: a client that followed it would show up as a second request.
        headers: answered >= 300 && answered < 400
          ? { ...extraHeaders, location: new URL("/moved", request.url).toString() }
          : extraHeaders
      })
    }
  })
  const port = server.port ?? 0

  return {
    url: `http://127.0.0.1:${port}${path}`,
    port,
    requests,
    answer: (next) => {
      status = next
    },
    failNext: (count, next = 500) => {
      scripted = Array.from({ length: count }, () => next)
    },
    script: (answers) => {
      scripted = [...answers]
    },
    hang: (on) => {
      hanging = on
      if (!on) hung.splice(0).forEach((release) => release())
    },
    headers: (next) => {
      extraHeaders = next
    },
    delay: (ms) => {
      delayMs = ms
    },
    clear: () => {
      requests.length = 0
    },
    stop: async () => {
      hung.splice(0).forEach((release) => release())
      await server.stop(true)
    }
  }
}

/** A loopback URL nothing listens on (a port that was just free). */
export const closedPortUrl = async (): Promise<string> => {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") })
  const port = probe.port
  await probe.stop(true)
  return `http://127.0.0.1:${port}/hooks`
}

/** Polls `check` until it returns a value other than undefined/false, or fails after `timeoutMs`. */
export const eventually = async <T>(
  description: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 15_000
): Promise<T> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== false) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${description}`)
    await Bun.sleep(25)
  }
}
