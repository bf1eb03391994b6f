import { afterAll, beforeAll, describe, expect, test } from "bun:test"
import { randomBytes } from "node:crypto"
import {
  type AccountBody,
  type ApiKeyBody,
  createDatabase,
  dropDatabase,
  type ErrorBody,
  ledgerState,
  type OpenApiDocument,
  type PredictionBody,
  type Response,
  startTestServer,
  type TestServer,
  type UploadLink,
  type WalletBody
} from "./support/server.js"

let server: TestServer
/** A webhook receiver on loopback, counting what it is sent. */
let receiver: ReturnType<typeof Bun.serve>
let delivered = 0
let receiverDelayMs = 0
/** Hears the text of every statement the server runs, while a test sets it. */
let statementHeard: ((text: string) => void) | undefined

beforeAll(async () => {
  server = await startTestServer(
    { WEBHOOK_ALLOW_PRIVATE: "true", WEBHOOK_ALLOW_INSECURE: "true" },
    { onStatement: ({ text }) => statementHeard?.(text) }
  )
  receiver = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async () => {
      delivered++
      if (receiverDelayMs > 0) await Bun.sleep(receiverDelayMs)
      return new Response(null, { status: 204 })
    }
  })
})
afterAll(async () => {
  await receiver.stop(true)
  await server.close()
})

const newKey = () => `key-${randomBytes(8).toString("hex")}`

const grant = <T = WalletBody>(accountId: string, body: unknown, idempotencyKey?: string, target: TestServer = server) =>
  target.admin<T>(`/admin/accounts/${accountId}/credits`, {
    method: "POST",
    body,
    headers: idempotencyKey === undefined ? {} : { "idempotency-key": idempotencyKey }
  })

const grantRows = async (accountId: string) =>
  (await server.db.query<{ amount: number; bucket: string; reference_id: string | null; request_id: string | null }>(
    `SELECT amount::int, bucket, reference_id, request_id FROM credit_journal
      WHERE account_id = $1 AND entry_type = 'grant' AND operation = 'admin' AND reason IS DISTINCT FROM 'opening balance'
      ORDER BY seq`,
    [accountId]
  )).rows

const storedKeys = async (key: string) =>
  Number((await server.db.query<{ n: string }>("SELECT count(*) AS n FROM idempotency_keys WHERE key = $1", [key])).rows[0].n)

const expectValidationError = (response: Response, naming: string) => {
  expect(response.status).toBe(422)
  const { error } = response.body as ErrorBody
  expect(error.type).toBe("validation_error")
  expect(error.message).toContain(naming)
}

describe("Idempotency-Key on a grant", () => {
  test("20 concurrent retries with one key credit once, and every answer is identical", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => grant(accountId, { bucket: "topup", amount: 500, reason: "invoice 42" }, key))
    )
    for (const answer of answers) {
      expect(answer.status).toBe(200)
      expect(answer.body).toEqual(answers[0].body)
      expect(answer.headers.get("content-type")).toBe(answers[0].headers.get("content-type"))
    }
    expect(answers[0].body.topup_balance).toBe(500)
    const first = answers.filter((answer) => answer.headers.get("idempotent-replayed") === null)
    const replays = answers.filter((answer) => answer.headers.get("idempotent-replayed") === "true")
    expect(first).toHaveLength(1)
    expect(replays).toHaveLength(19)
    for (const replay of replays) {
      expect(replay.headers.get("original-request-id")).toBe(first[0].headers.get("x-request-id"))
      // Each replay is its own request, with its own id.
      expect(replay.headers.get("x-request-id")).not.toBe(first[0].headers.get("x-request-id"))
    }
    expect(await grantRows(accountId)).toEqual([
      { amount: 500, bucket: "topup", reference_id: null, request_id: first[0].headers.get("x-request-id") }
    ])
    const state = await ledgerState(server.db, accountId)
    expect(state.topup).toBe(500)
    expect(state.journalTopup).toBe(500)
  })

  test("a later retry replays the stored answer, not the wallet as it is now", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    const first = await grant(accountId, { bucket: "topup", amount: 100 }, key)
    await grant(accountId, { bucket: "topup", amount: 7 })
    const again = await grant(accountId, { bucket: "topup", amount: 100 }, key)
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    expect(again.body.topup_balance).toBe(100)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect((await ledgerState(server.db, accountId)).topup).toBe(107)
  })

  test("the same parameters in another key order or spacing replay", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    const first = await grant(accountId, { bucket: "topup", amount: 30 }, key)
    const reordered = await server.admin(`/admin/accounts/${accountId}/credits`, {
      method: "POST",
      rawBody: `{ "amount": 30,\n  "bucket": "topup" }`,
      headers: { "content-type": "application/json", "idempotency-key": key }
    })
    expect(reordered.status).toBe(200)
    expect(reordered.headers.get("idempotent-replayed")).toBe("true")
    expect(reordered.body).toEqual(first.body)
    expect((await ledgerState(server.db, accountId)).topup).toBe(30)
  })

  test("the same key with another body, or on another route, is 422 naming Idempotency-Key and changes nothing", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const other = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    expect((await grant(accountId, { bucket: "topup", amount: 10 }, key)).status).toBe(200)

    expectValidationError(await grant(accountId, { bucket: "topup", amount: 11 }, key), "Idempotency-Key")
    expectValidationError(await grant(accountId, { bucket: "monthly", amount: 10 }, key), "Idempotency-Key")
    expectValidationError(await grant(other.accountId, { bucket: "topup", amount: 10 }, key), "Idempotency-Key")
    const keyRoute = await server.admin(`/admin/accounts/${accountId}/keys`, {
      method: "POST",
      body: {},
      headers: { "idempotency-key": key }
    })
    expectValidationError(keyRoute, "Idempotency-Key")

    expect((await ledgerState(server.db, accountId)).topup).toBe(10)
    expect((await ledgerState(server.db, other.accountId)).topup).toBe(0)
    // The first answer is still the one replayed.
    const replay = await grant(accountId, { bucket: "topup", amount: 10 }, key)
    expect(replay.headers.get("idempotent-replayed")).toBe("true")
    expect(replay.body.topup_balance).toBe(10)
  })

  test.each([
    ["empty", ""],
    ["256 characters", "k".repeat(256)],
    ["a tab", "a\tb"],
    ["a non-ASCII character", "clé"]
  ])("a key that is %s is 422 naming Idempotency-Key, and nothing is credited", async (_name, key) => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    expectValidationError(await grant(accountId, { bucket: "topup", amount: 5 }, key), "Idempotency-Key")
    expect((await ledgerState(server.db, accountId)).topup).toBe(0)
  })

  test("a 255-character key of printable ASCII is accepted", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = `a !"#$%&'()*+,-./0123456789:;<=>?@AZ[\\]^_\`az{|}~`.padEnd(255, "x")
    expect((await grant(accountId, { bucket: "topup", amount: 5 }, key)).status).toBe(200)
    const replay = await grant(accountId, { bucket: "topup", amount: 5 }, key)
    expect(replay.headers.get("idempotent-replayed")).toBe("true")
    expect((await ledgerState(server.db, accountId)).topup).toBe(5)
  })

  test("requests failing validation or authentication store nothing: the key stays free", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    expectValidationError(await grant(accountId, { bucket: "topup", amount: -1 }, key), "amount")
    const unauthenticated = await server.request(`/admin/accounts/${accountId}/credits`, {
      method: "POST",
      key: "not-the-admin-token",
      body: { bucket: "topup", amount: 5 },
      headers: { "idempotency-key": key }
    })
    expect(unauthenticated.status).toBe(401)
    expect(await storedKeys(key)).toBe(0)

    const real = await grant(accountId, { bucket: "topup", amount: 5 }, key)
    expect(real.status).toBe(200)
    expect(real.headers.get("idempotent-replayed")).toBeNull()
    expect((await ledgerState(server.db, accountId)).topup).toBe(5)
  })

  test("an error answer is not stored: a retry with the key runs again", async () => {
    const missing = "acct_00000000000000000000000000000000"
    const key = newKey()
    const first = await grant<ErrorBody>(missing, { bucket: "topup", amount: 5 }, key)
    expect(first.status).toBe(404)
    expect(first.body.error.type).toBe("not_found")
    expect(await storedKeys(key)).toBe(0)
    const second = await grant(missing, { bucket: "topup", amount: 5 }, key)
    expect(second.status).toBe(404)
    expect(second.headers.get("idempotent-replayed")).toBeNull()
  })

  test("a repeat arriving while the first runs waits for it, then replays", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    const first = await grant(accountId, { bucket: "topup", amount: 8 }, key)
    // Make the stored key look like a request still running in a live process.
    await server.db.query("UPDATE idempotency_keys SET status = 'in_progress', locked_at = now() WHERE key = $1", [key])
    let settled = false
    const waiting = grant(accountId, { bucket: "topup", amount: 8 }, key).then((answer) => {
      settled = true
      return answer
    })
    // It keeps waiting while the claim is alive (the owner's heartbeat moves locked_at): it reads the
    // row again and again, and is still waiting after its fifth read found the claim in progress.
    let reads = 0
    statementHeard = (text) => {
      if (text.includes("FROM idempotency_keys") && text.includes("SELECT fingerprint")) reads++
    }
    try {
      for (let heartbeat = 0; reads <= 5; heartbeat++) {
        if (heartbeat > 500) throw new Error(`the repeat read the key ${reads} times, then stopped looking`)
        if (settled) break
        await server.db.query("UPDATE idempotency_keys SET locked_at = now() WHERE key = $1", [key])
        await Bun.sleep(10)
      }
    } finally {
      statementHeard = undefined
    }
    expect(settled).toBe(false)
    await server.db.query("UPDATE idempotency_keys SET status = 'completed' WHERE key = $1", [key])
    const replay = await waiting
    expect(replay.status).toBe(200)
    expect(replay.headers.get("idempotent-replayed")).toBe("true")
    expect(replay.body).toEqual(first.body)
    expect((await ledgerState(server.db, accountId)).topup).toBe(8)
  })

  test("a claim abandoned by a dead process is taken over once its heartbeat is older than the lock timeout", async () => {
    const stalled = await startTestServer({ IDEMPOTENCY_LOCK_TIMEOUT: "1 second" }, { databaseUrl: server.databaseUrl })
    try {
      const { accountId } = await stalled.account({ plan: "pro", topup_balance: 0 })
      const key = newKey()
      expect((await grant(accountId, { bucket: "topup", amount: 3 }, key, stalled)).status).toBe(200)
      // As if the owner died before storing its answer, 5 seconds ago.
      await server.db.query(
        "UPDATE idempotency_keys SET status = 'in_progress', locked_at = now() - interval '5 seconds' WHERE key = $1",
        [key]
      )
      const retry = await grant(accountId, { bucket: "topup", amount: 3 }, key, stalled)
      expect(retry.status).toBe(200)
      expect(retry.headers.get("idempotent-replayed")).toBeNull()
      expect(retry.body.topup_balance).toBe(6)
    } finally {
      await stalled.stop()
    }
  })
})

describe("Idempotency-Key on the other admin POSTs", () => {
  test("a retried account creation creates one account", async () => {
    const key = newKey()
    const name = `idem-${randomBytes(4).toString("hex")}`
    const answers = await Promise.all(
      Array.from({ length: 5 }, () =>
        server.admin<AccountBody>("/admin/accounts", { method: "POST", body: { plan: "pro", name }, headers: { "idempotency-key": key } })
      )
    )
    for (const answer of answers) expect(answer.body).toEqual(answers[0].body)
    const { rows } = await server.db.query("SELECT id FROM accounts WHERE name = $1", [name])
    expect(rows).toEqual([{ id: answers[0].body.id }])
  })

  test("a retried key creation creates one key and shows the same plain key; the stored answer is sealed", async () => {
    const { accountId } = await server.account({ plan: "pro" })
    const key = newKey()
    const create = () =>
      server.admin<ApiKeyBody>(`/admin/accounts/${accountId}/keys`, {
        method: "POST",
        body: { scopes: ["hooks:read"] },
        headers: { "idempotency-key": key }
      })
    const first = await create()
    const second = await create()
    expect(first.status).toBe(200)
    expect(second.body).toEqual(first.body)
    expect(second.headers.get("idempotent-replayed")).toBe("true")
    const { rows } = await server.db.query("SELECT id FROM api_keys WHERE account_id = $1 AND 'hooks:read' = ALL(scopes)", [accountId])
    expect(rows).toEqual([{ id: first.body.id }])
    const stored = await server.db.query<{ response_body: string }>("SELECT response_body FROM idempotency_keys WHERE key = $1", [key])
    expect(stored.rows[0].response_body).not.toContain(first.body.api_key)
    // The replayed key works.
    expect((await server.request("/v1/wallet", { key: second.body.api_key })).status).toBe(200)
  })

  test("admin keys are scoped to the admin token: the same key on /v1 is another key", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const key = newKey()
    expect((await grant(accountId, { bucket: "topup", amount: 2 }, key)).status).toBe(200)
    const { rows } = await server.db.query<{ scope: string }>("SELECT scope FROM idempotency_keys WHERE key = $1", [key])
    expect(rows).toHaveLength(1)
    expect(rows[0].scope).toMatch(/^admin:[0-9a-f]{32}$/)
    expect(rows[0].scope).not.toContain(server.adminToken)
    const { key: apiKey } = await server.account({ plan: "pro" })
    const onV1 = await server.request("/v1/predict/upload", { method: "POST", key: apiKey, headers: { "idempotency-key": key } })
    expect(onV1.status).toBe(200)
    expect(onV1.headers.get("idempotent-replayed")).toBeNull()
  })
})

describe("Idempotency-Key on /v1", () => {
  /** The webhook secret, shown by PUT /v1/webhooks and POST /v1/webhooks/rotate. */
  interface WebhookSecret {
    readonly secret: string
  }

  const post = <T>(path: string, key: string, idempotencyKey: string, body?: unknown) =>
    server.request<T>(path, { method: "POST", key, body, headers: { "idempotency-key": idempotencyKey } })

  test("a retried POST /v1/predict/upload gives the same link and creates one prediction", async () => {
    const owner = await server.account({ plan: "pro" })
    const key = newKey()
    const answers = await Promise.all(Array.from({ length: 5 }, () => post<UploadLink>("/v1/predict/upload", owner.key, key)))
    answers.push(await post<UploadLink>("/v1/predict/upload", owner.key, key))
    for (const answer of answers) {
      expect(answer.status).toBe(200)
      expect(answer.body).toEqual(answers[0].body)
    }
    expect(answers[0].body.upload_url).toContain("/uploads/")
    expect(answers.filter((answer) => answer.headers.get("idempotent-replayed") === "true")).toHaveLength(5)
    const { rows } = await server.db.query("SELECT id FROM predictions WHERE account_id = $1", [owner.accountId])
    expect(rows).toEqual([{ id: answers[0].body.prediction_id }])

    // Another key is another link; the same key from another account is that account's own.
    const fresh = await post<UploadLink>("/v1/predict/upload", owner.key, newKey())
    expect(fresh.body.upload_id).not.toBe(answers[0].body.upload_id)
    const stranger = await server.account({ plan: "pro" })
    const theirs = await post<UploadLink>("/v1/predict/upload", stranger.key, key)
    expect(theirs.status).toBe(200)
    expect(theirs.headers.get("idempotent-replayed")).toBeNull()
    expect(theirs.body.upload_id).not.toBe(answers[0].body.upload_id)
  })

  test("a retried retry start reserves once and replays its X-Credits-* headers", async () => {
    const poor = await server.account({ plan: "pro", monthly_balance: 0, topup_balance: 0 })
    const link = (await server.request<UploadLink>("/v1/predict/upload", { method: "POST", key: poor.key })).body
    // An MP4 by its first bytes: the file lands, the reserve is short, the job waits.
    const mp4 = new Uint8Array([0, 0, 0, 24, ...Buffer.from("ftypisom"), 0, 0, 2, 0, ...Buffer.from("isommp41"), ...randomBytes(64)])
    const put = await fetch(server.url + new URL(link.upload_url).pathname, { method: "PUT", body: mp4 })
    expect(put.status).toBe(200)
    const key = newKey()
    const short = await post<PredictionBody>("/v1/predict", poor.key, key, { upload_id: link.upload_id })
    expect(short.status).toBe(402)
    // An error answer is not kept: after the top-up the same key runs the retry.
    await server.admin(`/admin/accounts/${poor.accountId}/credits`, { method: "POST", body: { bucket: "topup", amount: 25 } })
    const first = await post<PredictionBody>("/v1/predict", poor.key, key, { upload_id: link.upload_id })
    const again = await post<PredictionBody>("/v1/predict", poor.key, key, { upload_id: link.upload_id })
    expect(first.status).toBe(200)
    expect(first.headers.get("x-credits-charged")).toBe("20")
    expect(first.headers.get("x-credits-remaining")).toBe("5")
    expect(first.headers.get("idempotent-replayed")).toBeNull()
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    expect(again.headers.get("x-credits-charged")).toBe("20")
    expect(again.headers.get("x-credits-remaining")).toBe("5")
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    const holds = await server.db.query("SELECT id FROM holds WHERE account_id = $1 AND operation = 'prediction'", [poor.accountId])
    expect(holds.rows).toHaveLength(1)
    // Without a key, a repeat is the contract's own answer: the job is past awaiting_upload, nothing charged.
    const plain = await server.request<PredictionBody>("/v1/predict", { method: "POST", key: poor.key, body: { upload_id: link.upload_id } })
    expect(plain.headers.get("x-credits-charged")).toBe("0")
  })

  test("a retried rotate rotates once and shows the same new secret", async () => {
    const account = await server.account({ plan: "pro" })
    const configured = await server.request<WebhookSecret>("/v1/webhooks", {
      method: "PUT",
      key: account.key,
      body: { url: `http://127.0.0.1:${receiver.port}/hooks` }
    })
    expect(configured.status).toBe(200)
    const stored = async () =>
      (await server.db.query("SELECT secret_ciphertext, previous_secret_ciphertext FROM webhooks WHERE account_id = $1", [account.accountId]))
        .rows[0]
    const key = newKey()
    const first = await post<WebhookSecret>("/v1/webhooks/rotate", account.key, key)
    expect(first.status).toBe(200)
    expect(first.body.secret).toMatch(/^whsec_/)
    expect(first.body.secret).not.toBe(configured.body.secret)
    const afterFirst = await stored()
    const again = await post<WebhookSecret>("/v1/webhooks/rotate", account.key, key)
    expect(again.body).toEqual(first.body)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(await stored()).toEqual(afterFirst)
    // The secret is in the stored answer only sealed.
    const answer = await server.db.query<{ response_body: string }>("SELECT response_body FROM idempotency_keys WHERE key = $1", [key])
    expect(answer.rows[0].response_body).not.toContain(first.body.secret)

    const next = await post<WebhookSecret>("/v1/webhooks/rotate", account.key, newKey())
    expect(next.body.secret).not.toBe(first.body.secret)
  })

  test("a retried webhook test delivers once", async () => {
    const account = await server.account({ plan: "pro" })
    await server.request("/v1/webhooks", { method: "PUT", key: account.key, body: { url: `http://127.0.0.1:${receiver.port}/hooks` } })
    const before = delivered
    const key = newKey()
    const first = await post<{ readonly delivered: boolean }>("/v1/webhooks/test", account.key, key)
    expect(first.status).toBe(200)
    expect(first.body.delivered).toBe(true)
    const again = await post<{ readonly delivered: boolean }>("/v1/webhooks/test", account.key, key)
    expect(again.body).toEqual(first.body)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(delivered - before).toBe(1)
  })

  test("a client that hangs up mid-request gets the finished answer on its retry, with no second effect", async () => {
    const account = await server.account({ plan: "pro" })
    await server.request("/v1/webhooks", { method: "PUT", key: account.key, body: { url: `http://127.0.0.1:${receiver.port}/hooks` } })
    const before = delivered
    const key = newKey()
    receiverDelayMs = 300
    try {
      const hangUp = new AbortController()
      const abandoned = fetch(`${server.url}/v1/webhooks/test`, {
        method: "POST",
        headers: { authorization: `Bearer ${account.key}`, "idempotency-key": key },
        signal: hangUp.signal
      }).catch((error: unknown) => error)
      while (delivered === before) await Bun.sleep(10)
      hangUp.abort()
      expect(await abandoned).toBeInstanceOf(Error)
      // The retry waits for the run the client left, then replays it.
      const retry = await post<{ readonly delivered: boolean }>("/v1/webhooks/test", account.key, key)
      expect(retry.status).toBe(200)
      expect(retry.headers.get("idempotent-replayed")).toBe("true")
      expect(retry.body.delivered).toBe(true)
      expect(delivered - before).toBe(1)
    } finally {
      receiverDelayMs = 0
    }
  })
})

describe("keys in Postgres", () => {
  test("a replay works after the server restarts on the same database", async () => {
    const databaseUrl = await createDatabase()
    // The key is scoped to the admin token and its answer sealed with the server key: both persist.
    const env = {
      ADMIN_TOKEN: `admin_${randomBytes(16).toString("hex")}`,
      WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64url")
    }
    const key = newKey()
    const send = (target: TestServer, path: string, body: unknown) =>
      target.request<WalletBody>(path, { method: "POST", key: env.ADMIN_TOKEN, body, headers: { "idempotency-key": key } })
    let accountId = ""
    let first: Response<WalletBody> | undefined
    const before = await startTestServer(env, { databaseUrl })
    try {
      accountId = (await before.request<AccountBody>("/admin/accounts", {
        method: "POST",
        key: env.ADMIN_TOKEN,
        body: { plan: "pro", topup_balance: 0 }
      })).body.id
      first = await send(before, `/admin/accounts/${accountId}/credits`, { bucket: "topup", amount: 250 })
      expect(first.status).toBe(200)
    } finally {
      await before.close()
    }
    const after = await startTestServer(env, { databaseUrl })
    try {
      const replay = await send(after, `/admin/accounts/${accountId}/credits`, { bucket: "topup", amount: 250 })
      expect(replay.status).toBe(200)
      expect(replay.headers.get("idempotent-replayed")).toBe("true")
      expect(replay.body).toEqual(first.body)
      expect((await ledgerState(after.db, accountId)).topup).toBe(250)
    } finally {
      await after.close()
      await dropDatabase(databaseUrl)
    }
  })

  test("a key expires after its TTL: the sweeper deletes it and the key runs again", async () => {
    const shortLived = await startTestServer(
      { IDEMPOTENCY_KEY_TTL: "300 millis", IDEMPOTENCY_SWEEP_INTERVAL: "100 millis" },
      { databaseUrl: server.databaseUrl }
    )
    try {
      const { accountId } = await shortLived.account({ plan: "pro", topup_balance: 0 })
      const key = newKey()
      expect((await grant(accountId, { bucket: "topup", amount: 4 }, key, shortLived)).status).toBe(200)
      while ((await storedKeys(key)) > 0) await Bun.sleep(50)
      const again = await grant(accountId, { bucket: "topup", amount: 4 }, key, shortLived)
      expect(again.status).toBe(200)
      expect(again.headers.get("idempotent-replayed")).toBeNull()
      expect((await ledgerState(server.db, accountId)).topup).toBe(8)
    } finally {
      await shortLived.stop()
    }
  })
})

describe("grant references", () => {
  test("a repeated reference credits once and answers the wallet", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const body = { bucket: "topup", amount: 1_000, reference: "in_1Q2w3E4r" }
    const first = await grant(accountId, body)
    const second = await grant(accountId, body)
    expect(first.status).toBe(200)
    expect(second.status).toBe(200)
    expect(first.body.topup_balance).toBe(1_000)
    expect(second.body).toEqual(first.body)
    const rows = await grantRows(accountId)
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({ amount: 1_000, bucket: "topup", reference_id: "in_1Q2w3E4r" })
  })

  test("concurrent grants with one reference credit once", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const answers = await Promise.all(
      Array.from({ length: 15 }, () => grant(accountId, { bucket: "monthly", amount: 40, reference: "pay_77" }))
    )
    for (const answer of answers) expect(answer.status).toBe(200)
    const state = await ledgerState(server.db, accountId)
    expect(state.monthly).toBe(1_000 + 40)
    expect(state.journalMonthly).toBe(state.monthly)
    expect(await grantRows(accountId)).toHaveLength(1)
  })

  test("the same reference with another amount or bucket is 422 naming reference; another account may reuse it", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    const other = await server.account({ plan: "pro", topup_balance: 0 })
    expect((await grant(accountId, { bucket: "topup", amount: 50, reference: "inv-9" })).status).toBe(200)
    expectValidationError(await grant(accountId, { bucket: "topup", amount: 51, reference: "inv-9" }), "reference")
    expectValidationError(await grant(accountId, { bucket: "monthly", amount: 50, reference: "inv-9" }), "reference")
    expect((await ledgerState(server.db, accountId)).topup).toBe(50)
    expect((await grant(other.accountId, { bucket: "topup", amount: 51, reference: "inv-9" })).status).toBe(200)
    expect((await ledgerState(server.db, other.accountId)).topup).toBe(51)
  })

  test("a reference must be 1 to 255 printable characters", async () => {
    const { accountId } = await server.account({ plan: "pro", topup_balance: 0 })
    expectValidationError(await grant(accountId, { bucket: "topup", amount: 5, reference: "" }), "reference")
    expectValidationError(await grant(accountId, { bucket: "topup", amount: 5, reference: "r".repeat(256) }), "reference")
    expect((await ledgerState(server.db, accountId)).topup).toBe(0)
  })
})

describe("the contract", () => {
  test("/openapi.json documents Idempotency-Key on the POST endpoints, reference, and the credit history", async () => {
    const spec = (await server.request<OpenApiDocument>("/openapi.json")).body
    for (
      const path of [
        "/admin/accounts",
        "/admin/accounts/{id}/keys",
        "/admin/accounts/{id}/credits",
        "/v1/predict/upload",
        "/v1/predict",
        "/v1/webhooks/rotate",
        "/v1/webhooks/test"
      ]
    ) {
      const operation = spec.paths[path].post
      const header = operation.parameters?.find((parameter) => parameter.name === "Idempotency-Key")
      expect(header).toMatchObject({ in: "header", required: false, schema: { minLength: 1, maxLength: 255 } })
      expect(operation.responses["200"].headers?.["Idempotent-Replayed"]).toBeDefined()
    }
    expect(spec.components.schemas.GrantCredits.properties?.reference).toBeDefined()
    for (const path of ["/v1/wallet/transactions", "/admin/accounts/{id}/transactions"]) {
      const operation = spec.paths[path].get
      const names = operation.parameters?.map((parameter) => parameter.name)
      expect(names).toEqual(expect.arrayContaining(["limit", "cursor", "type", "created[gte]", "created[lte]"]))
      expect(operation.responses["200"]).toBeDefined()
      expect(operation.responses["400"]).toBeDefined()
    }
    expect(spec.components.schemas.CreditTransaction).toBeDefined()
  })
})
