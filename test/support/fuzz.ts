/**
 * Hostile requests for every route, and the checks on their answers: shared by the fuzz test
 * (`test/fuzz.test.ts`, a short run in `npm test`) and the long run (`npm run fuzz`).
 *
 * Every answer must be a documented status with the error envelope and the request id (never a
 * 5xx), and no rejected request may carry X-Credits-Charged; the caller then checks that the
 * wallet moved by exactly the sum of the charges answered.
 */
import fc from "fast-check"

export interface FuzzTarget {
  readonly url: string
  readonly adminToken: string
  /** A valid API key of the account whose wallet is checked. */
  readonly key: string
}

const documented = new Set([200, 400, 401, 402, 403, 404, 409, 410, 413, 415, 422, 429, 431])

/** Bun's own limit on the request line plus headers (`--max-http-header-size`, default 16 KiB). */
const bunHeadLimit = 16 * 1024
/** Room for the headers fetch adds itself (host, user-agent, accept, content-length, ...). */
const clientHeaderSlack = 512

export const routes = [
  ["GET", "/v1/wallet"],
  ["GET", "/v1/wallet/transactions"],
  ["GET", "/v1/hooks/categories"],
  ["GET", "/v1/hooks/search"],
  ["GET", "/v1/hooks/list"],
  ["GET", "/v1/hooks/{id}"],
  ["POST", "/v1/predict/upload"],
  ["POST", "/v1/predict"],
  ["GET", "/v1/predict/{id}"],
  ["GET", "/v1/webhooks"],
  ["PUT", "/v1/webhooks"],
  ["DELETE", "/v1/webhooks"],
  ["POST", "/v1/webhooks/rotate"],
  ["POST", "/v1/webhooks/test"],
  ["PUT", "/uploads/{id}"],
  ["POST", "/admin/accounts"],
  ["GET", "/admin/accounts/{id}"],
  ["PATCH", "/admin/accounts/{id}"],
  ["POST", "/admin/accounts/{id}/keys"],
  ["DELETE", "/admin/keys/{id}"],
  ["POST", "/admin/accounts/{id}/credits"],
  ["GET", "/admin/accounts/{id}/transactions"],
  ["PUT", "/admin/catalog/categories"],
  ["POST", "/admin/catalog/hooks"],
  ["GET", "/metrics"],
  ["GET", "/healthz"],
  ["GET", "/readyz"],
  ["GET", "/openapi.json"]
] as const

const nasty = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.constantFrom(
    "' OR 1=1 --",
    "'; DROP TABLE accounts; --",
    "../../etc/passwd",
    "%2e%2e%2f%2e%2e%2f",
    "hook_" + "f".repeat(32),
    "hook_" + "F".repeat(32),
    "pred_" + "0".repeat(32),
    "\u0000",
    "\ud83d\ude80".repeat(50),
    "😀".repeat(200),
    "the of and",
    "!!!",
    "null",
    "a".repeat(5_000),
    "<script>alert(1)</script>",
    "${jndi:ldap://x}",
    "%00%ff",
    "eyJ2IjoxfQ",
    "."
  )
)

const jsonValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.record({ url: nasty }),
  fc.record({ upload_id: nasty }),
  fc.record({ plan: nasty, monthly_balance: fc.oneof(fc.integer(), fc.double(), fc.constant(null)) }),
  fc.record({ bucket: nasty, amount: fc.oneof(fc.integer(), fc.double(), fc.string(), fc.constant(1e300)) }),
  fc.array(fc.record({ slug: nasty, name: nasty }), { maxLength: 3 }),
  fc.constant(null)
)

/** How a body goes on the wire. */
type Framing = "plain" | "chunked" | "truncated"

interface Body {
  readonly bytes: Uint8Array
  readonly type: string | null
  readonly framing: Framing
}

const utf8 = (text: string) => new TextEncoder().encode(text)
const textBody = (text: string, type: string | null, framing: Framing = "plain"): Body => ({ bytes: utf8(text), type, framing })

const multipartTypes = fc.constantFrom("multipart/form-data; boundary=x", "multipart/form-data", "multipart/mixed; boundary=--")
const wellFormedMultipart = (field: string) =>
  `--x\r\nContent-Disposition: form-data; name="${field.replace(/["\r\n]/g, "")}"\r\n\r\nvalue\r\n--x--\r\n`

const body: fc.Arbitrary<Body | undefined> = fc.oneof(
  fc.constant(undefined),
  jsonValue.map((value) => textBody(JSON.stringify(value), "application/json")),
  nasty.map((text) => textBody(text, "application/json")),
  nasty.map((text) => textBody(text, "text/plain")),
  nasty.map((text) => textBody(text, "application/x-www-form-urlencoded")),
  fc.constant(textBody(JSON.stringify({ upload_id: "x".repeat(100_000) }), "application/json")),
  fc.constant(textBody('{"a":'.repeat(2_000), "application/json")),
  // Multipart, well formed or not, on routes that take JSON (or nothing).
  fc.tuple(nasty, multipartTypes).map(([text, type]) => textBody(text, type)),
  fc.tuple(nasty, multipartTypes).map(([field, type]) => textBody(wellFormedMultipart(field), type)),
  // Bytes that are not UTF-8 (lone continuation bytes, overlongs, 0xFF), declared as JSON or not.
  fc.tuple(fc.uint8Array({ minLength: 1, maxLength: 64 }), fc.constantFrom("application/json", "text/plain", null)).map(
    ([bytes, type]): Body => ({ bytes: new Uint8Array([0x7b, 0x22, 0xc0, 0xaf, 0xff, 0x80, ...bytes]), type, framing: "plain" })
  ),
  // Chunked (no Content-Length): small, and over the JSON limit.
  jsonValue.map((value) => textBody(JSON.stringify(value), "application/json", "chunked")),
  fc.constant(textBody(`{"url":"${"a".repeat(300_000)}"}`, "application/json", "chunked")),
  // Huge, with its length declared.
  fc.integer({ min: 1, max: 4 }).map((mib) => ({ bytes: new Uint8Array(mib * 1024 * 1024).fill(0x61), type: "application/json", framing: "plain" as const })),
  // Truncated: JSON cut short, and a body that ends before its declared Content-Length.
  jsonValue.map((value) => {
    const text = JSON.stringify({ wrap: value })
    return textBody(text.slice(0, Math.max(1, text.length >> 1)), "application/json")
  }),
  jsonValue.map((value) => textBody(JSON.stringify(value), "application/json", "truncated"))
)

export interface HostileRequest {
  readonly route: (typeof routes)[number]
  readonly wrongMethod: boolean
  readonly method: string
  readonly id: string
  readonly query: ReadonlyArray<readonly [string, string]>
  /** Raw bytes in the query string (percent-encoded, possibly not UTF-8). */
  readonly rawQuery: string | null
  readonly body: Body | undefined
  readonly auth: "valid" | "none" | "garbage" | "admin"
  readonly hugeHeader: boolean
}

/** The id of the i-th hook seedCatalog imports. */
const seededHookId = (i: number) => `hook_${i.toString(16).padStart(32, "0")}`
const seededHooks = 300

const hostile: fc.Arbitrary<HostileRequest> = fc.record({
  route: fc.constantFrom(...routes),
  wrongMethod: fc.boolean(),
  method: fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE"),
  id: nasty,
  query: fc.array(
    fc.tuple(fc.oneof(fc.constantFrom("q", "category", "cursor", "api_key", "key", "limit"), fc.string({ maxLength: 10 })), nasty),
    { maxLength: 3 }
  ),
  rawQuery: fc.option(fc.constantFrom("q=%ff%fe", "q=%c0%af", "q=%", "q=%zz", "category=%80", "q=%ed%a0%80"), { freq: 8 }),
  body,
  auth: fc.constantFrom("valid", "none", "garbage", "admin"),
  hugeHeader: fc.boolean()
})

/** Well-formed metered requests with the valid key, so that charges happen and the ledger check bites. */
const metered: fc.Arbitrary<HostileRequest> = fc.oneof(
  fc.tuple(fc.constant(routes[3]), fc.constantFrom("money", "the", "!!!", "😀", "save money", "of the", "nothing-matches")).map(([route, q]) => ({
    route,
    query: [["q", q] as const]
  })),
  fc.tuple(fc.constant(routes[4]), fc.constantFrom("finance", "fitness")).map(([route, category]) => ({ route, query: [["category", category] as const] })),
  fc.integer({ min: 0, max: seededHooks + 10 }).map((i) => ({ route: routes[5], query: [], id: seededHookId(i) }))
).map((partial): HostileRequest => ({
  wrongMethod: false,
  method: "GET",
  id: "",
  rawQuery: null,
  body: undefined,
  auth: "valid",
  hugeHeader: false,
  ...partial
}))

export const hostileRequest: fc.Arbitrary<HostileRequest> = fc.oneof({ arbitrary: hostile, weight: 9 }, { arbitrary: metered, weight: 1 })

/** What one request got: a status (or the connection closed without one) and its verdict. */
export interface Outcome {
  readonly status: number | "closed"
  readonly charged: number
  /** Why the answer breaks the rules, with what reproduces it; null when it is fine. */
  readonly problem: string | null
}

/** A request's method, path with query, and headers, as they go on the wire. */
const prepare = (target: FuzzTarget, r: HostileRequest) => {
  const path = r.route[1].replace("{id}", encodeURIComponent(r.id))
  const parts = r.query.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
  if (r.rawQuery !== null) parts.push(r.rawQuery)
  const query = parts.length === 0 ? "" : "?" + parts.join("&")
  const headers: Record<string, string> = {}
  if (r.auth === "valid") headers.authorization = `Bearer ${target.key}`
  if (r.auth === "garbage") headers.authorization = `Bearer ${r.id.slice(0, 200)}`.replace(/[\r\n\u0000-\u001f\u007f-\uffff]/g, "")
  if (r.auth === "admin") headers.authorization = `Bearer ${target.adminToken}`
  if (r.hugeHeader) headers["x-filler"] = "x".repeat(8_000)
  if (r.body !== undefined && r.body.type !== null) headers["content-type"] = r.body.type
  const method = r.wrongMethod ? r.method : r.route[0]
  return { method, path: path + query, headers }
}

/** The body as a stream: fetch sends it chunked (no Content-Length). */
const chunked = (bytes: Uint8Array) =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (let at = 0; at < bytes.length; at += 16_384) controller.enqueue(bytes.subarray(at, at + 16_384))
      controller.close()
    }
  })

/**
 * A request whose body ends before its declared Content-Length: written on a raw socket, which
 * the client then shuts. Whatever answer comes back within the timeout is read.
 */
const truncatedExchange = (url: URL, method: string, path: string, headers: Record<string, string>, bytes: Uint8Array) =>
  new Promise<{ status: number | "closed"; head: string }>((resolve) => {
    let received = ""
    let settled = false
    const finish = () => {
      if (settled) return
      settled = true
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(received)
      resolve({ status: status === null ? "closed" : Number(status[1]), head: received })
    }
    const head = `${method} ${path} HTTP/1.1\r\nhost: ${url.host}\r\n` +
      Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") +
      `content-length: ${bytes.length + 100}\r\nconnection: close\r\n\r\n`
    Bun.connect({
      hostname: url.hostname,
      port: Number(url.port),
      socket: {
        open(socket) {
          socket.write(head)
          socket.write(bytes.subarray(0, Math.max(0, bytes.length - 1)))
          socket.shutdown()
          setTimeout(() => {
            socket.terminate()
            finish()
          }, 5_000)
        },
        data(_socket, chunk) {
          received += new TextDecoder().decode(chunk)
        },
        close: finish,
        error: finish
      }
    }).catch(finish)
  })

/** Sends one hostile request and judges the answer. */
export const sendHostile = async (target: FuzzTarget, r: HostileRequest): Promise<Outcome> => {
  const { method, path, headers } = prepare(target, r)
  const reproducer = () =>
    `${method} ${path.slice(0, 300)} headers=${JSON.stringify(Object.keys(headers))} content-type=${JSON.stringify(r.body?.type ?? null)} ` +
    `framing=${r.body?.framing ?? "none"} body=${JSON.stringify(new TextDecoder().decode(r.body?.bytes.subarray(0, 200) ?? new Uint8Array()))}`
  const sendsBody = r.body !== undefined && method !== "GET"

  if (sendsBody && r.body!.framing === "truncated") {
    const answer = await truncatedExchange(new URL(target.url), method, path, headers, r.body!.bytes)
    if (typeof answer.status === "number" && answer.status >= 500) {
      return { status: answer.status, charged: 0, problem: `${answer.status} to a truncated body: ${reproducer()}` }
    }
    if (/x-credits-charged: [1-9]/i.test(answer.head)) return { status: answer.status, charged: 0, problem: `charged a truncated request: ${reproducer()}` }
    return { status: answer.status, charged: 0, problem: null }
  }

  const response = await fetch(target.url + path, {
    method,
    headers,
    body: !sendsBody ? undefined : r.body!.framing === "chunked" ? chunked(r.body!.bytes) : r.body!.bytes,
    ...(sendsBody && r.body!.framing === "chunked" ? { duplex: "half" } : {})
  } as RequestInit)
  const text = await response.text()
  const status = response.status
  const fail = (why: string): Outcome => ({ status, charged: 0, problem: `${why}: ${reproducer()} → ${status} ${text.slice(0, 300)}` })
  if (!documented.has(status)) return fail("undocumented status")
  if (status === 431 && text === "") {
    // Over Bun's own limit the request never reaches Hookline: a bare 431, connection closed.
    const head = `${method} ${path} HTTP/1.1\r\n` + Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("")
    if (Buffer.byteLength(head) <= bunHeadLimit - clientHeaderSlack) return fail("bare 431 under Bun's head limit")
    if (response.headers.get("connection") !== "close") return fail("bare 431 without Connection: close")
    return { status, charged: 0, problem: null }
  }
  const requestId = response.headers.get("x-request-id")
  if (requestId === null) return fail("no X-Request-Id")
  if (status >= 400) {
    let envelope: unknown
    try {
      envelope = JSON.parse(text)
    } catch {
      return fail("error body is not JSON")
    }
    const error = (envelope as { error?: { type?: unknown; message?: unknown; request_id?: unknown } }).error
    if (typeof error?.type !== "string" || typeof error.message !== "string" || error.request_id !== requestId) {
      return fail("error body is not the envelope")
    }
    if ((response.headers.get("x-credits-charged") ?? "0") !== "0") return fail("charged a refused request")
    return { status, charged: 0, problem: null }
  }
  return { status, charged: Number(response.headers.get("x-credits-charged") ?? "0"), problem: null }
}

export interface FuzzReport {
  readonly sent: number
  /** Status (or "closed") → count. */
  readonly statuses: ReadonlyMap<string, number>
  /** Sum of X-Credits-Charged over the 2xx answers. */
  readonly charged: number
  readonly problems: ReadonlyArray<string>
}

/**
 * A small catalog, so that searches, lists and hook gets find rows and charge: the ledger check
 * then covers real charges. Texts hold stop words, punctuation and emoji, for the substring fallback.
 */
export const seedCatalog = async (target: FuzzTarget, hooks = seededHooks) => {
  const admin = { authorization: `Bearer ${target.adminToken}` }
  const categories = await fetch(`${target.url}/admin/catalog/categories`, {
    method: "PUT",
    headers: { ...admin, "content-type": "application/json" },
    body: JSON.stringify([{ slug: "finance", name: "Finance" }, { slug: "fitness", name: "Fitness" }])
  })
  if (categories.status !== 200) throw new Error(`categories: ${categories.status}`)
  const lines = Array.from({ length: hooks }, (_, i) =>
    JSON.stringify({
      id: seededHookId(i),
      text: `Hook ${i}: the money trick of the day !!! 😀 ${i % 3 === 0 ? "save" : "spend"} and a null <script>`,
      platform: "tiktok",
      source_url: `https://fuzz.example/${i}`,
      category: i % 2 === 0 ? "finance" : "fitness",
      published_at: new Date(Date.UTC(2026, 0, 1) + i * 60_000).toISOString()
    }))
  const imported = await fetch(`${target.url}/admin/catalog/hooks`, {
    method: "POST",
    headers: { ...admin, "content-type": "application/x-ndjson" },
    body: lines.join("\n")
  })
  if (imported.status !== 200) throw new Error(`import: ${imported.status} ${await imported.text()}`)
}

/** Sends `requests` hostile requests, `concurrency` at a time, generated from `seed`. */
export const runFuzz = async (
  target: FuzzTarget,
  options: { readonly requests: number; readonly concurrency: number; readonly seed: number; readonly onProgress?: (sent: number) => void }
): Promise<FuzzReport> => {
  const statuses = new Map<string, number>()
  const problems: Array<string> = []
  let charged = 0
  let sent = 0
  const batchSize = 1_000
  for (let batch = 0; sent < options.requests; batch++) {
    const size = Math.min(batchSize, options.requests - sent)
    const requests = fc.sample(hostileRequest, { numRuns: size, seed: options.seed + batch })
    let next = 0
    const worker = async () => {
      while (next < requests.length) {
        const request = requests[next++]
        const outcome = await sendHostile(target, request)
        statuses.set(String(outcome.status), (statuses.get(String(outcome.status)) ?? 0) + 1)
        charged += outcome.charged
        if (outcome.problem !== null) problems.push(outcome.problem)
      }
    }
    await Promise.all(Array.from({ length: options.concurrency }, worker))
    sent += size
    options.onProgress?.(sent)
  }
  return { sent, statuses, charged, problems }
}
