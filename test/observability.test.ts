/**
 * Tracing, metrics and logs, observed from outside: a real server whose spans go to an
 * in-memory collector and whose log lines go to an array, real HTTP requests, and /metrics
 * scraped like Prometheus would.
 */
import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test"
import { ConfigProvider, Effect, Logger, Option, Tracer } from "effect"
import { join } from "node:path"
import { jsonLogger, LoggingLive, redactCredentials } from "../src/Logging.js"
import { makeSampler } from "../src/Observability/Sampling.js"
import { currentTraceParent, linkedTo } from "../src/Observability/Tracing.js"
import { ffmpegPath } from "./support/clips.js"
import { collectSpans } from "./support/spans.js"
import { eventually as pollUntil, startReceiver } from "./support/receiver.js"
import { adminClient, deployment, spawnServer } from "./support/process.js"
import {
  createDatabase,
  dropDatabase,
  ledgerState,
  startTestServer,
  type TestServer,
  type UploadLink,
  type WebhookSecretBody,
  type WebhookTestBody
} from "./support/server.js"
import { tempDir } from "./support/tempDirs.js"

/**
 * Waits for a condition the server reaches just after it answers (the span ends and the access
 * line is written once the response is on its way). Bounded; no assertion depends on timing.
 */
/** Polls until the probe gives a value; the receiver's deadline only guards against a hang, however loaded the machine. */
const eventually = <A>(probe: () => A | undefined | Promise<A | undefined>, what: string): Promise<A> => pollUntil(what, probe)

const collected = collectSpans()
const logLines: Array<string> = []
let server: TestServer
const receiver = startReceiver()
let account: { accountId: string; key: string; keyId: string }
const hookId = `hook_${"ab".repeat(16)}`

beforeAll(async () => {
  server = await startTestServer(
    // Every request traced, so each test sees its spans (sampling has its own tests).
    {
      LOG_LEVEL: "Info",
      WEBHOOK_ALLOW_PRIVATE: "true",
      WEBHOOK_ALLOW_INSECURE: "true",
      OTEL_TRACES_SAMPLER: "always_on",
      METRICS_TOKEN: metricsToken
    },
    // The plain JSON logger, without the redaction net: the lines must be clean by construction.
    { tracer: collected.tracer, logger: Logger.map(jsonLogger, (line) => logLines.push(line)) }
  )
  account = await server.account({ plan: "enterprise", monthly_balance: 100 })
  await server.db.query(
    `INSERT INTO hooks (id, text, platform, category, published_at) VALUES ($1, 'Stop scrolling: this changes everything', 'tiktok', NULL, now())`,
    [hookId]
  )
})
afterAll(async () => {
  await receiver.stop()
  await server.close()
})

const endedServerSpan = (requestId: string) =>
  eventually(
    () =>
      collected.spans.find((span) =>
        span.kind === "server" && span.attributes.get("hookline.request_id") === requestId && span.status._tag === "Ended"
      ),
    `the server span of ${requestId}`
  )

/** A statement's span: a client span with its SQL (named after the database, as OpenTelemetry's conventions have it). */
const isStatement = (span: Tracer.Span) => span.kind === "client" && span.attributes.has("db.query.text")

/** True when `ancestor` is `span`'s parent, grandparent, ... */
const descendsFrom = (span: Tracer.Span, ancestor: Tracer.Span): boolean => {
  let parent: Tracer.AnySpan | undefined = Option.getOrUndefined(span.parent)
  while (parent !== undefined) {
    if (parent.spanId === ancestor.spanId) return true
    parent = parent._tag === "Span" ? Option.getOrUndefined(parent.parent) : undefined
  }
  return false
}

const metricsToken = "metrics-token-for-tests"
const metricsAuthorization = { authorization: `Bearer ${metricsToken}` }

/** The value of one sample line (`name{labels} value`), 0 when absent. */
const sample = (text: string, name: string, labels: Record<string, string> = {}): number => {
  const wanted = Object.entries(labels).map(([key, value]) => `${key}="${value}"`)
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null || match[1] !== name) continue
    const present = match[2] === undefined ? [] : match[2].split(/,(?=[a-zA-Z_]+=")/)
    if (present.length === wanted.length && wanted.every((label) => present.includes(label))) return Number(match[3])
  }
  return 0
}

const scrape = async () => {
  const response = await fetch(`${server.url}/metrics`, { headers: metricsAuthorization })
  expect(response.status).toBe(200)
  expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8")
  return response.text()
}

describe("tracing", () => {
  test("a metered request: one server span with route, status, request id, account and credits; ledger and SQL spans below it", async () => {
    const response = await server.request(`/v1/hooks/${hookId}`, { key: account.key })
    expect(response.status).toBe(200)
    expect(response.headers.get("x-credits-charged")).toBe("1")
    const requestId = response.headers.get("x-request-id")!
    const root = await endedServerSpan(requestId)

    expect(root.name).toBe("http.server GET")
    expect(root.attributes.get("http.route")).toBe("/v1/hooks/:id")
    expect(root.attributes.get("http.response.status_code")).toBe(200)
    expect(root.attributes.get("hookline.account_id")).toBe(account.accountId)
    expect(root.attributes.get("hookline.key_id")).toBe(account.keyId)
    expect(root.attributes.get("hookline.credits_charged")).toBe(1)
    expect(root.attributes.get("hookline.operation")).toBe("hook")
    expect(root.attributes.get("http.request.header.authorization")).toBe("<redacted>")

    // A single hook is charged at once: one Ledger.charge, one statement, no hold.
    const inRequest = collected.spans.filter((span) => descendsFrom(span, root))
    for (const span of inRequest) expect(span.traceId).toBe(root.traceId)
    const charges = inRequest.filter((span) => span.name === "Ledger.charge")
    expect(charges.length).toBe(1)
    expect(inRequest.map((span) => span.name)).not.toContain("Ledger.reserve")
    expect(charges[0].attributes.get("amount")).toBe(1)
    // The statement runs under the Ledger's repository span (LedgerRepo.chargeAtOnce).
    const statements = collected.spans.filter((span) => isStatement(span) && descendsFrom(span, charges[0]))
    expect(statements.length).toBe(1)
    expect(String(statements[0].attributes.get("db.query.text"))).toContain("credit_journal")
    expect(String(statements[0].attributes.get("db.query.text"))).not.toContain("INSERT INTO holds")
  })

  test("a search: a reserve before the query and a settle after it, each one statement on the holds table", async () => {
    const response = await server.request("/v1/hooks/search?q=scrolling", { key: account.key })
    expect(response.status).toBe(200)
    const root = await endedServerSpan(response.headers.get("x-request-id")!)
    const inRequest = collected.spans.filter((span) => descendsFrom(span, root))
    const reserve = inRequest.find((span) => span.name === "Ledger.reserve")!
    const settle = inRequest.find((span) => span.name === "Ledger.settle")!
    expect(reserve.attributes.get("amount")).toBe(2)
    expect(settle.attributes.get("charge")).toBe(Number(response.headers.get("x-credits-charged")))
    for (const operation of [reserve, settle]) {
      const statements = collected.spans.filter((span) => isStatement(span) && descendsFrom(span, operation))
      expect(statements.length).toBe(1)
      expect(String(statements[0].attributes.get("db.query.text"))).toContain("holds")
    }
    const started = (span: Tracer.Span) => span.status.startTime
    expect(started(reserve) < started(settle)).toBe(true)
    expect(started(root) <= started(reserve)).toBe(true)
  })

  test("a caller's traceparent makes the request span a child in the caller's trace", async () => {
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
    const parentId = "00f067aa0ba902b7"
    const response = await server.request("/v1/wallet", {
      key: account.key,
      headers: { traceparent: `00-${traceId}-${parentId}-01` }
    })
    expect(response.status).toBe(200)
    const root = await endedServerSpan(response.headers.get("x-request-id")!)
    expect(root.traceId).toBe(traceId)
    expect(root.parent._tag === "Some" && root.parent.value.spanId).toBe(parentId)
    expect(root.attributes.get("http.route")).toBe("/v1/wallet")
    expect(root.attributes.get("hookline.credits_charged")).toBeUndefined()
  })

  test("a key sent in the query string is refused and lands in no span; upload tokens neither", async () => {
    const refused = await server.request(`/v1/wallet?api_key=${account.key}&q=1`, { key: account.key })
    expect(refused.status).toBe(401)
    const root = await endedServerSpan(refused.headers.get("x-request-id")!)
    expect(root.attributes.get("http.response.status_code")).toBe(401)
    expect(root.attributes.get("url.full")).toBe(`${server.url}/v1/wallet`)
    expect(root.attributes.has("url.query")).toBe(false)
    expect(root.attributes.get("hookline.account_id")).toBeUndefined()

    const uploadToken = "upload_token_that_is_a_secret_0123456789"
    const upload = await server.request(`/uploads/${uploadToken}?x=1`, { method: "PUT", rawBody: "not a video" })
    const uploadSpan = await endedServerSpan(upload.headers.get("x-request-id")!)
    expect(uploadSpan.attributes.get("url.path")).toBe("/uploads/:token")
    expect(uploadSpan.attributes.get("http.route")).toBe("/uploads/:token")

    const everything = JSON.stringify(collected.spans.map((span) => [span.name, [...span.attributes]]))
    expect(everything.includes(account.key)).toBe(false)
    expect(everything.includes("api_key=")).toBe(false)
    expect(everything.includes(uploadToken)).toBe(false)
  })

  test("a prediction job's span links to the upload request that queued it; settle and scoring are its children", async () => {
    const clip = join(tempDir("hookline-obs-"), "clip.mp4")
    const made = Bun.spawnSync([ffmpegPath, "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10:duration=2",
      "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", clip])
    expect(made.exitCode).toBe(0)
    const before = await scrape()

    const link = await server.request<UploadLink>("/v1/predict/upload", {
      method: "POST",
      key: account.key
    })
    expect(link.status).toBe(200)
    const upload = await fetch(server.url + new URL(link.body.upload_url).pathname, {
      method: "PUT",
      body: Bun.file(clip),
      headers: { "content-type": "video/mp4" }
    })
    expect(upload.status).toBe(200)
    const uploadSpan = await endedServerSpan(upload.headers.get("x-request-id")!)

    const job = await eventually(
      () => collected.spans.find((span) => span.name === "Predictions.work" && span.status._tag === "Ended" &&
        span.attributes.get("predictionId") === link.body.prediction_id),
      "the job's span"
    )
    expect(job.attributes.get("hookline.outcome")).toBe("succeeded")
    expect(job.links).toHaveLength(1)
    expect(job.links[0].span.traceId).toBe(uploadSpan.traceId)
    expect(job.traceId).not.toBe(uploadSpan.traceId)
    const inJob = collected.spans.filter((span) => descendsFrom(span, job)).map((span) => span.name)
    expect(inJob).toContain("ClipScorer.score")
    expect(inJob).toContain("Ledger.settle")

    const after = await scrape()
    const delta = (name: string, labels: Record<string, string>) => sample(after, name, labels) - sample(before, name, labels)
    expect(delta("hookline_job_runs_total", { outcome: "succeeded" })).toBe(1)
    expect(delta("hookline_credits_charged_total", { operation: "prediction" })).toBe(20)
  })

  test("with OTEL_EXPORTER_OTLP_ENDPOINT set, spans and metrics are exported as OTLP/HTTP JSON, query strings scrubbed", async () => {
    const received: Array<{ path: string; body: string }> = []
    const collector = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: async (request) => {
        received.push({ path: new URL(request.url).pathname, body: await request.text() })
        return new Response("{}", { headers: { "content-type": "application/json" } })
      }
    })
    const exporting = await startTestServer({
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
      OTEL_TRACES_SAMPLER: "always_on",
      OTEL_SERVICE_NAME: "hookline-test",
      OTEL_EXPORT_INTERVAL: "100 millis"
    })
    try {
      const owner = await exporting.account({ plan: "pro" })
      const ok = await exporting.request("/v1/wallet", { key: owner.key })
      expect((await exporting.request(`/v1/wallet?api_key=${owner.key}`)).status).toBe(401)
      const requestId = ok.headers.get("x-request-id")!
      const traces = await eventually(() => {
        const bodies = received.filter((entry) => entry.path === "/v1/traces").map((entry) => entry.body).join("\n")
        return bodies.includes(requestId) && bodies.includes("http.server GET") ? bodies : undefined
      }, "the request's span at the collector")
      expect(traces).toContain('"hookline-test"')
      expect(traces).toContain("hookline.account_id")
      expect(traces.includes(owner.key)).toBe(false)
      expect(traces.includes("api_key=")).toBe(false)
      await eventually(
        () => received.some((entry) => entry.path === "/v1/metrics" && entry.body.includes("http_server_requests_total")) || undefined,
        "the request metrics at the collector"
      )
    } finally {
      await exporting.close()
      collector.stop(true)
    }
  })

  test("background work can link to the request that caused it", async () => {
    const [traceParent, span] = await Effect.runPromise(
      Effect.all([currentTraceParent, Effect.currentSpan]).pipe(Effect.withSpan("upload request"))
    )
    expect(traceParent).toBe(`00-${span.traceId}-${span.spanId}-01`)
    const links = linkedTo(traceParent)
    expect(links).toHaveLength(1)
    expect(links[0].span.traceId).toBe(span.traceId)
    expect(links[0].span.spanId).toBe(span.spanId)
    expect(linkedTo(null)).toEqual([])
    expect(linkedTo("not a traceparent")).toEqual([])
    expect(await Effect.runPromise(currentTraceParent)).toBeNull()
  })
})

describe("sampling", () => {
  /** A server of its own whose spans a fresh collector sees, started with `env`. */
  const sampledServer = async (env: Record<string, string>) => {
    const own = collectSpans()
    const started = await startTestServer(env, { tracer: own.tracer, background: false, databaseUrl: server.databaseUrl })
    own.spans.length = 0 // start-up spans (migrations check, pool) are not under test
    return { server: started, spans: own.spans }
  }

  test("always_off: requests make no span at all, not even SQL spans", async () => {
    const { server: quiet, spans } = await sampledServer({ OTEL_TRACES_SAMPLER: "always_off" })
    try {
      for (let i = 0; i < 10; i++) {
        expect((await quiet.request(`/v1/hooks/${hookId}`, { key: account.key })).status).toBe(200)
        expect((await quiet.request("/v1/hooks/search?q=scrolling", { key: account.key })).status).toBe(200)
      }
      expect(spans.map((span) => span.name)).toEqual([])
    } finally {
      await quiet.stop()
      await quiet.db.end()
    }
  })

  test("an unsampled request that is slow or fails still leaves one span: route, status, request id, why", async () => {
    const { server: quiet, spans } = await sampledServer({ OTEL_TRACES_SAMPLER: "always_off", TRACES_SLOW_REQUEST: "0 millis" })
    try {
      const response = await quiet.request("/v1/wallet", { key: account.key })
      expect(response.status).toBe(200)
      const requestId = response.headers.get("x-request-id")!
      const span = await eventually(() => spans.find((s) => s.attributes.get("hookline.request_id") === requestId), "the summary span")
      expect(span.kind).toBe("server")
      expect(span.attributes.get("http.route")).toBe("/v1/wallet")
      expect(span.attributes.get("http.response.status_code")).toBe(200)
      expect(span.attributes.get("hookline.sampled_because")).toBe("slow")
      expect(span.status._tag).toBe("Ended")
      // Only the summary: no SQL or ledger span was made for the request.
      expect(spans.length).toBe(1)
    } finally {
      await quiet.stop()
      await quiet.db.end()
    }
  })

  test("parent-based: a caller's sampled traceparent is followed, an unsampled one is not", async () => {
    const { server: quiet, spans } = await sampledServer({ OTEL_TRACES_SAMPLER: "parentbased_always_off" })
    try {
      const traceId = "0af7651916cd43dd8448eb211c80319c"
      const sampled = await quiet.request("/v1/wallet", { key: account.key, headers: { traceparent: `00-${traceId}-b7ad6b7169203331-01` } })
      const server = await eventually(
        () => spans.find((s) => s.kind === "server" && s.attributes.get("hookline.request_id") === sampled.headers.get("x-request-id") && s.status._tag === "Ended"),
        "the sampled request's span"
      )
      expect(server.traceId).toBe(traceId)
      expect(spans.some((s) => isStatement(s) && s.traceId === traceId)).toBe(true)
      const before = spans.length
      expect((await quiet.request("/v1/wallet", { key: account.key, headers: { traceparent: `00-${traceId}-b7ad6b7169203331-00` } })).status).toBe(200)
      expect(spans.length).toBe(before)
    } finally {
      await quiet.stop()
      await quiet.db.end()
    }
  })

  test("a sampled and an unsampled request run the same statements, through SqlClient", async () => {
    const statements: Array<{ readonly text: string; readonly requestId: string; readonly traced: boolean }> = []
    const own = collectSpans()
    const quiet = await startTestServer(
      { OTEL_TRACES_SAMPLER: "parentbased_always_off" },
      { tracer: own.tracer, background: false, databaseUrl: server.databaseUrl, onStatement: (statement) => statements.push(statement) }
    )
    try {
      // A metered read: the key lookup, the hold, the hook and the settle.
      const path = `/v1/hooks/${hookId}`
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
      const sampled = await quiet.request(path, { key: account.key, headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } })
      const unsampled = await quiet.request(path, { key: account.key })
      expect([sampled.status, unsampled.status]).toEqual([200, 200])
      const of = (response: { readonly headers: Headers }) =>
        statements.filter((statement) => statement.requestId === response.headers.get("x-request-id"))
      expect(of(sampled).length).toBeGreaterThanOrEqual(3)
      expect(of(sampled).every((statement) => statement.traced)).toBe(true)
      expect(of(unsampled).every((statement) => !statement.traced)).toBe(true)
      // The key lookup is cached by now: compare what both ran after it.
      const texts = (response: { readonly headers: Headers }) => of(response).map((statement) => statement.text).filter((text) => !text.includes("api_keys"))
      expect(texts(unsampled)).toEqual(texts(sampled))
      expect(own.spans.some((span) => isStatement(span) && span.traceId === traceId)).toBe(true)
    } finally {
      await quiet.stop()
      await quiet.db.end()
    }
  })

  test("an unknown OTEL_TRACES_SAMPLER stops the start with a message naming the setting", async () => {
    await expect(startTestServer({ OTEL_TRACES_SAMPLER: "sometimes" }, { databaseUrl: server.databaseUrl, background: false })).rejects.toThrow(
      /OTEL_TRACES_SAMPLER/
    )
  })
})

describe("metrics", () => {
  test("/metrics (with the metrics token) counts requests by route and status, with latency histograms", async () => {
    const before = await scrape()
    const ok = { route: "/v1/wallet", method: "GET", status: "200" }
    const refused = { route: "/v1/wallet", method: "GET", status: "401" }
    for (let i = 0; i < 3; i++) expect((await server.request("/v1/wallet", { key: account.key })).status).toBe(200)
    expect((await server.request("/v1/wallet")).status).toBe(401)
    expect((await server.request("/v1/nothing/here", { key: account.key })).status).toBe(404)

    const after = await eventually(async () => {
      const text = await scrape()
      return sample(text, "http_server_requests_total", refused) - sample(before, "http_server_requests_total", refused) === 1
        ? text
        : undefined
    }, "the refused request counted")
    const delta = (name: string, labels: Record<string, string>) => sample(after, name, labels) - sample(before, name, labels)
    expect(delta("http_server_requests_total", ok)).toBe(3)
    expect(delta("http_server_requests_total", refused)).toBe(1)
    expect(delta("http_server_requests_total", { route: "unmatched", method: "GET", status: "404" })).toBe(1)
    expect(delta("http_server_request_duration_seconds_count", ok)).toBe(3)
    expect(sample(after, "http_server_request_duration_seconds_bucket", { ...ok, le: "+Inf" }))
      .toBe(sample(after, "http_server_request_duration_seconds_count", ok))
    expect(after).toContain("# TYPE http_server_requests_total counter")
    expect(after).toContain("# TYPE http_server_request_duration_seconds histogram")
    // Labels are templates and statuses only: no raw path, account or key.
    expect(after).not.toContain("/v1/nothing/here")
    expect(after).not.toContain(account.accountId)
  })

  test("credits charged are counted by operation, holds by outcome", async () => {
    const before = await scrape()
    expect((await server.request(`/v1/hooks/${hookId}`, { key: account.key })).status).toBe(200)
    const search = await server.request("/v1/hooks/search?q=scrolling", { key: account.key })
    expect(search.status).toBe(200)
    const after = await scrape()
    const delta = (name: string, labels: Record<string, string>) => sample(after, name, labels) - sample(before, name, labels)
    // A hook is charged at once (no hold); a search reserves, then settles its hold.
    expect(delta("hookline_credits_charged_total", { operation: "hook" })).toBe(1)
    expect(delta("hookline_holds_resolved_total", { operation: "hook", outcome: "settled" })).toBe(0)
    expect(delta("hookline_credits_charged_total", { operation: "search" })).toBe(Number(search.headers.get("x-credits-charged")))
    expect(delta("hookline_holds_resolved_total", { operation: "search", outcome: "settled" })).toBe(1)
    expect((await ledgerState(server.db, account.accountId)).pendingHolds).toBe(0)
  })

  test("webhook attempts are counted by outcome", async () => {
    const put = await server.request<WebhookSecretBody>("/v1/webhooks", { method: "PUT", key: account.key, body: { url: receiver.url } })
    expect(put.status).toBe(200)
    const before = await scrape()
    receiver.answer(200)
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key: account.key })).body.delivered).toBe(true)
    receiver.answer(500)
    expect((await server.request<WebhookTestBody>("/v1/webhooks/test", { method: "POST", key: account.key })).body.status_code).toBe(500)
    receiver.answer(200)
    const after = await scrape()
    const delta = (outcome: string) =>
      sample(after, "hookline_webhook_attempts_total", { outcome }) - sample(before, "hookline_webhook_attempts_total", { outcome })
    expect(delta("delivered")).toBe(1)
    expect(delta("rejected")).toBe(1)
    expect(sample(after, "hookline_webhook_attempt_duration_seconds_count", { outcome: "delivered" })).toBeGreaterThanOrEqual(1)
    // The secret shown once at PUT never reaches a log line.
    expect(logLines.some((line) => line.includes(put.body.secret))).toBe(false)
  })

  test("jobs by state, queue depth and age are read at scrape time, with the pool size limit", async () => {
    // Its own server without background fibers: no worker or dispatcher takes the rows below.
    const quiet = await startTestServer({ METRICS_TOKEN: metricsToken }, { background: false })
    try {
      const owner = await quiet.account({ plan: "enterprise" })
      const job = (id: string, status: string, queuedAgo: string | null) =>
        quiet.db.query(
          `INSERT INTO predictions (id, account_id, key_id, status, queued_at)
           VALUES ($1, $2, $3, $4, CASE WHEN $5::interval IS NULL THEN NULL ELSE now() - $5::interval END)`,
          [id, owner.accountId, owner.keyId, status, queuedAgo]
        )
      await job("pred_q1", "queued", "90 seconds")
      await job("pred_q2", "queued", "5 seconds")
      await job("pred_r1", "running", "120 seconds")
      await job("pred_s1", "succeeded", null)
      await quiet.db.query(
        `INSERT INTO webhook_deliveries (id, event_id, account_id, event_type, payload, next_attempt_at)
         VALUES ('dlv_1', 'evt_1', $1, 'prediction.succeeded', '{}', now() - interval '40 seconds'),
                ('dlv_2', 'evt_2', $1, 'prediction.succeeded', '{}', now() + interval '1 hour')`,
        [owner.accountId]
      )

      const response = await fetch(`${quiet.url}/metrics`, { headers: metricsAuthorization })
      expect(response.status).toBe(200)
      const text = await response.text()
      expect(sample(text, "hookline_jobs", { state: "queued" })).toBe(2)
      expect(sample(text, "hookline_jobs", { state: "running" })).toBe(1)
      expect(sample(text, "hookline_jobs", { state: "succeeded" })).toBe(1)
      expect(sample(text, "hookline_jobs", { state: "failed" })).toBe(0)
      expect(text).toContain(`hookline_jobs{state="failed"} 0`)
      expect(sample(text, "hookline_queue_depth", { queue: "predictions" })).toBe(2)
      expect(sample(text, "hookline_queue_depth", { queue: "webhooks" })).toBe(2)
      expect(sample(text, "hookline_queue_oldest_age_seconds", { queue: "predictions" })).toBeGreaterThanOrEqual(90)
      expect(sample(text, "hookline_queue_oldest_age_seconds", { queue: "webhooks" })).toBeGreaterThanOrEqual(40)
      // The driver's pool reports its limit only, not its usage.
      expect(sample(text, "hookline_db_pool_max_connections")).toBe(10)
      expect(text).toContain("# TYPE hookline_queue_depth gauge")
    } finally {
      await quiet.close()
    }
  })
})

interface LogLine {
  readonly message: unknown
  readonly logLevel: string
  readonly annotations: Record<string, unknown>
}

describe("logs", () => {
  test("one JSON access line per request, with its request id, route, status and a path without secrets", async () => {
    const uploadToken = "another_secret_upload_token_987654321"
    const sent = [
      await server.request("/v1/wallet", { key: account.key }),
      await server.request(`/v1/wallet?api_key=${account.key}`),
      await server.request(`/uploads/${uploadToken}`, { method: "PUT", rawBody: "x", headers: { authorization: `Bearer ${account.key}` } })
    ]
    const requestIds = sent.map((response) => response.headers.get("x-request-id")!)
    const lines = await eventually(() => {
      const parsed = logLines.map((line) => JSON.parse(line) as LogLine)
      const found = requestIds.map((id) => parsed.find((line) => line.message === "request" && line.annotations.request_id === id))
      return found.every((line) => line !== undefined) ? found as Array<LogLine> : undefined
    }, "the access lines")

    expect(lines[0].logLevel).toBe("INFO")
    expect(lines[0].annotations).toMatchObject({ method: "GET", route: "/v1/wallet", path: "/v1/wallet", status: 200 })
    expect(typeof lines[0].annotations.duration_ms).toBe("number")
    expect(lines[1].annotations).toMatchObject({ route: "/v1/wallet", path: "/v1/wallet", status: 401 })
    expect(lines[2].annotations).toMatchObject({
      method: "PUT",
      route: "/uploads/:token",
      path: "/uploads/:token",
      status: sent[2].status
    })

    const everything = logLines.join("\n")
    expect(everything.includes(account.key)).toBe(false)
    expect(everything.includes("api_key=")).toBe(false)
    expect(everything.includes(uploadToken)).toBe(false)
    expect(everything.includes(server.adminToken)).toBe(false)
  })

  test("a line a handler logs carries the request id too", async () => {
    const put = await server.request("/v1/webhooks", { method: "PUT", key: account.key, body: { url: receiver.url } })
    expect(put.status).toBe(200)
    const response = await server.request("/v1/webhooks/test", { method: "POST", key: account.key })
    expect(response.status).toBe(200)
    const requestId = response.headers.get("x-request-id")!
    const lines = await eventually(() => {
      const mine = logLines.map((line) => JSON.parse(line) as LogLine).filter((line) => line.annotations.request_id === requestId)
      return mine.length >= 2 ? mine : undefined
    }, "the handler's line and the access line")
    expect(lines.map((line) => line.message)).toEqual(["webhook test sent", "request"])
    expect(lines[0].annotations).toMatchObject({ delivered: true, status_code: 200 })
  })

  test("LOG_FORMAT=json and logfmt: one line per entry, annotations kept, credentials redacted", async () => {
    const printed: Array<string> = []
    const print = spyOn(console, "log").mockImplementation((line: unknown) => {
      printed.push(String(line))
    })
    try {
      for (const format of ["json", "logfmt"]) {
        await Effect.runPromise(
          Effect.logInfo(`refused hkl_live_${"x".repeat(32)}`).pipe(
            Effect.annotateLogs({ request_id: "req_log_test", header: "Bearer secret-token-123" }),
            Effect.provide(LoggingLive),
            Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: { LOG_FORMAT: format, LOG_LEVEL: "info" } }))
          )
        )
      }
    } finally {
      print.mockRestore()
    }
    expect(printed).toHaveLength(2)
    const json = JSON.parse(printed[0]) as LogLine
    expect(json).toMatchObject({
      message: "refused [REDACTED]",
      logLevel: "INFO",
      annotations: { request_id: "req_log_test", header: "Bearer [REDACTED]" }
    })
    expect(printed[1]).toContain('message="refused [REDACTED]"')
    expect(printed[1]).toContain("request_id=req_log_test")
    expect(printed.join("\n")).not.toContain("secret-token-123")
  })

  test("the redaction net replaces anything shaped like a credential", () => {
    const text = redactCredentials(
      "key hkl_live_AbCdEf0123456789_-xyz; Authorization: Bearer sometoken123; secret whsec_c2VjcmV0c2VjcmV0+/=="
    )
    expect(text).toBe("key [REDACTED]; Authorization: Bearer [REDACTED]; secret [REDACTED]")
  })
})

describe("the server process's own log (bun src/main.ts)", () => {
  test("LOG_FORMAT=json: every line is one JSON entry, written once, with no key in it", async () => {
    const databaseUrl = await createDatabase()
    const shared = deployment(databaseUrl)
    const server = await spawnServer({ deployment: shared, env: { LOG_FORMAT: "json", LOG_LEVEL: "info" } })
    try {
      const { key } = await adminClient(server, shared.adminToken).account({ monthly_balance: 10 })
      expect((await server.request("/v1/wallet", { key })).status).toBe(200)
      expect((await server.request(`/v1/wallet?api_key=${key}`)).status).toBe(401)
      server.kill("SIGTERM")
      expect(await server.exited).toBe(0)
      const lines = server.output().split("\n").filter((line) => line.trim() !== "")
      const entries = lines.map((line) => {
        try {
          return JSON.parse(line) as { message: unknown }
        } catch {
          throw new Error(`not a JSON log line: ${line}`)
        }
      })
      const listening = entries.filter((entry) => String(entry.message).startsWith("Listening on"))
      expect(listening).toHaveLength(1)
      expect(entries.length).toBeGreaterThanOrEqual(3)
      expect(server.output()).not.toContain(key)
    } finally {
      await dropDatabase(databaseUrl)
    }
  })
})

describe("the parent-based sampler", () => {
  test("follows a valid W3C traceparent's sampled flag; an invalid one is left to the root sampler", () => {
    const alwaysOn = makeSampler("parentbased_always_on", 1)
    const alwaysOff = makeSampler("parentbased_always_off", 0)
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
    const spanId = "00f067aa0ba902b7"
    expect(alwaysOff(`00-${traceId}-${spanId}-01`)).toBe(true)
    expect(alwaysOff(`00-${traceId}-${spanId}-03`)).toBe(true)
    expect(alwaysOn(`00-${traceId}-${spanId}-00`)).toBe(false)
    for (const invalid of [
      null,
      "garbage",
      `00-${"0".repeat(32)}-${spanId}-01`,
      `00-${traceId}-${"0".repeat(16)}-01`,
      `00-${traceId.toUpperCase()}-${spanId}-01`,
      `00-${traceId}-${spanId}-1`,
      `00-${traceId}-${spanId}`
    ]) {
      expect({ invalid, off: alwaysOff(invalid), on: alwaysOn(invalid) }).toEqual({ invalid, off: false, on: true })
    }
  })
})
