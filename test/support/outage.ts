/**
 * The outage scenarios shared by the outage tests and `npm run chaos`: metered load from several
 * clients at once against a Hookline process while its PostgreSQL (or its Redis) goes away and
 * comes back, every answer recorded; then the ledger check.
 */
import type Pg from "pg"
import type { ServerProcess } from "./process.js"

export interface Answer {
  /** Which client sent it (its index in the keys). */
  readonly client: number
  /** 0: no HTTP answer at all (connection refused or reset). */
  readonly status: number
  readonly retryAfter: string | null
  readonly errorType: string | null
  readonly errorMessage: string | null
  readonly startedAt: number
  readonly durationMs: number
  readonly path: string
  /** X-Credits-Charged (0 when absent) and X-Request-Id (null without an answer). */
  readonly charged: number
  readonly requestId: string | null
}

/** The requests a client cycles through: a metered list (reserve → settle), a wallet read, a metered search. */
const paths = ["/v1/hooks/search?q=hook", "/v1/wallet", "/v1/hooks/search?q=opening"] as const

const ask = async (url: string, key: string, path: string, timeoutMs: number): Promise<Omit<Answer, "client">> => {
  const startedAt = Date.now()
  const started = performance.now()
  try {
    const response = await fetch(url + path, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(timeoutMs) })
    const text = await response.text()
    let errorType: string | null = null
    let errorMessage: string | null = null
    if (response.status >= 400) {
      try {
        const error = (JSON.parse(text) as { error?: { type?: string; message?: string } }).error
        errorType = error?.type ?? null
        errorMessage = error?.message ?? null
      } catch {
        errorType = null
      }
    }
    return {
      status: response.status,
      retryAfter: response.headers.get("retry-after"),
      errorType,
      errorMessage,
      startedAt,
      durationMs: performance.now() - started,
      path,
      charged: Number(response.headers.get("x-credits-charged") ?? 0),
      requestId: response.headers.get("x-request-id")
    }
  } catch {
    return { status: 0, retryAfter: null, errorType: null, errorMessage: null, startedAt, durationMs: performance.now() - started, path, charged: 0, requestId: null }
  }
}

export interface Load {
  readonly answers: Array<Answer>
  /** Stops the clients and resolves once each has finished its last request. */
  readonly stop: () => Promise<void>
}

/** One client per key, each sending its next request as soon as the last one is answered. */
export const startLoad = (server: Pick<ServerProcess, "url">, keys: ReadonlyArray<string>, options: { readonly timeoutMs?: number } = {}): Load => {
  const answers: Array<Answer> = []
  let running = true
  const client = async (key: string, index: number) => {
    for (let turn = index; running; turn++) {
      const answer = { client: index, ...(await ask(server.url, key, paths[turn % paths.length], options.timeoutMs ?? 10_000)) }
      answers.push(answer)
      // A refused connection answers at once: do not spin on it.
      if (answer.status === 0 || answer.status === 503) await Bun.sleep(20)
    }
  }
  const clients = keys.map((key, index) => client(key, index))
  return {
    answers,
    stop: async () => {
      running = false
      await Promise.all(clients)
    }
  }
}

/** Answers counted by status ("0" = no HTTP answer). */
export const byStatus = (answers: ReadonlyArray<Answer>): Record<string, number> => {
  const counts: Record<string, number> = {}
  for (const answer of answers) counts[String(answer.status)] = (counts[String(answer.status)] ?? 0) + 1
  return counts
}

/**
 * Waits until `condition` holds, checking every 50 ms; fails with `what` after `boundMs`.
 * Returns how long it took.
 */
export const waitFor = async (what: string, boundMs: number, condition: () => Promise<boolean>): Promise<number> => {
  const started = Date.now()
  for (;;) {
    if (await condition()) return Date.now() - started
    if (Date.now() - started > boundMs) throw new Error(`${what}: not within ${boundMs} ms`)
    await Bun.sleep(50)
  }
}

/** Time from `since` until every one of `clients` had a 2xx answer to a request sent after it; null while some has none. */
export const recoveryMs = (answers: ReadonlyArray<Answer>, since: number, clients: number): number | null => {
  const firstAnswered = new Map<number, number>()
  for (const answer of answers) {
    if (answer.startedAt < since || answer.status < 200 || answer.status >= 300) continue
    const at = answer.startedAt + answer.durationMs
    firstAnswered.set(answer.client, Math.min(firstAnswered.get(answer.client) ?? at, at))
  }
  return firstAnswered.size < clients ? null : Math.max(...firstAnswered.values()) - since
}

export interface LedgerCheck {
  readonly accounts: number
  /** Accounts whose wallet differs from the sum of its journal. */
  readonly unequal: number
  /** Holds still pending although their expiry has passed. */
  readonly pendingPastExpiry: number
  readonly pending: number
}

/** Every wallet against its journal, and the holds left pending. */
export const checkLedger = async (db: Pg.Pool): Promise<LedgerCheck> => {
  const wallets = await db.query<{ accounts: number; unequal: number }>(
    `SELECT count(*)::int AS accounts,
            count(*) FILTER (WHERE w.monthly_balance <> COALESCE(j.monthly, 0) OR w.topup_balance <> COALESCE(j.topup, 0))::int AS unequal
       FROM wallets w
       LEFT JOIN (SELECT account_id,
                         sum(amount) FILTER (WHERE bucket = 'monthly') AS monthly,
                         sum(amount) FILTER (WHERE bucket = 'topup') AS topup
                    FROM credit_journal GROUP BY account_id) j ON j.account_id = w.account_id`
  )
  const holds = await db.query<{ pending: number; past: number }>(
    `SELECT count(*)::int AS pending, count(*) FILTER (WHERE expires_at <= now())::int AS past FROM holds WHERE status = 'pending'`
  )
  return {
    accounts: wallets.rows[0].accounts,
    unequal: wallets.rows[0].unequal,
    pendingPastExpiry: holds.rows[0].past,
    pending: holds.rows[0].pending
  }
}

/**
 * What the answers said they charged against what the journal took, request by request (a hold's
 * reserve less its release, or a charge taken at once), for the given accounts. A request the
 * journal took from that no answer accounts for had an unknown outcome for its client: no HTTP
 * answer at all, or a 503 that says the outcome is unknown.
 */
export const chargesAgainstJournal = async (db: Pg.Pool, accountIds: ReadonlyArray<string>, answers: ReadonlyArray<Answer>) => {
  const { rows } = await db.query<{ request_id: string | null; taken: number }>(
    `SELECT request_id, (-sum(amount))::int AS taken FROM credit_journal
      WHERE account_id = ANY($1) AND entry_type IN ('reserve', 'release') GROUP BY request_id`,
    [accountIds]
  )
  const taken = new Map(rows.map((row) => [row.request_id, row.taken]))
  const answered = new Map(answers.filter((answer) => answer.requestId !== null).map((answer) => [answer.requestId, answer]))
  const mismatched = answers.filter((answer) => answer.status === 200 && (taken.get(answer.requestId) ?? 0) !== answer.charged)
  const charged503 = answers.filter((answer) => answer.status === 503 && answer.charged !== 0)
  const unaccounted = rows.filter((row) => row.taken !== 0 && (row.request_id === null || !answered.has(row.request_id) ||
    answered.get(row.request_id)?.status !== 200))
  return {
    answeredCharges: answers.reduce((sum, answer) => sum + (answer.status === 200 ? answer.charged : 0), 0),
    journalTaken: rows.reduce((sum, row) => sum + row.taken, 0),
    mismatched,
    charged503,
    unaccounted
  }
}
