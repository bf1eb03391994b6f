/**
 * The bare baseline: Bun.serve and the `pg` driver, no framework, issuing the same SQL as
 * Hookline for the same request: the key lookup by hash (with the same 500 ms in-process cache
 * as src/Auth/Auth.ts), the Ledger's reserve and settle statements (copied verbatim, with the
 * same parameter order, and checked against the running Ledger by bench/ledger.ts), and each
 * route's own query. What it skips is what a framework adds: schema decoding and encoding,
 * the error envelope, middleware, tracing, metrics and logs.
 *
 * Run as its own process by startBaseline() (processes.ts). Other scenarios add routes with a
 * module listed in BASELINE_ROUTES whose default export is a `BaselineRouteModule`.
 */
import { createHash, randomUUID } from "node:crypto"
import Pg from "pg"

/** A parameterised statement, numbered like @effect/sql numbers its interpolations ($1, $2, ...). */
export interface Statement {
  readonly text: string
  readonly values: Array<unknown>
}

/** `sql\`... ${value} ...\`` → { text: "... $1 ...", values: [value] }. Fragments are inlined. */
export const sql = (strings: TemplateStringsArray, ...values: ReadonlyArray<unknown>): Statement => {
  let text = strings[0]
  const params: Array<unknown> = []
  values.forEach((value, index) => {
    if (isFragment(value)) {
      text += value.text.replace(/\$(\d+)/g, (_match, n: string) => `$${params.length + Number(n)}`)
      params.push(...value.values)
    } else {
      params.push(value)
      text += `$${params.length}`
    }
    text += strings[index + 1]
  })
  return { text, values: params }
}

const isFragment = (value: unknown): value is Statement =>
  typeof value === "object" && value !== null && "text" in value && "values" in value

/** Hookline's id shape: prefix + 32 hex characters. */
export const newId = (prefix: string) => `${prefix}_${randomUUID().replace(/-/g, "")}`

/** Whitespace-insensitive form of a statement's text, to compare with the Ledger's. */
export const normalizeSql = (text: string) => text.replace(/\s+/g, " ").trim()

export interface ReserveOptions {
  readonly operation: string
  readonly referenceId?: string | null
  readonly requestId?: string | null
  /** The caller's API key, counted against its spend limit as the Ledger counts it. */
  readonly keyId?: string | null
}

/** src/Ledger/RepoSql.ts `keyBudgetCte`. */
const keyBudgetCte = (keyId: string | null, at: Statement) =>
  keyId === null
    ? sql`budget AS (SELECT NULL::bigint AS lim, 0::bigint AS spent, NULL::timestamptz AS kpe WHERE false)`
    : sql`budget AS (
        SELECT k.spend_limit AS lim, CASE WHEN k.spend_period_end = b.kpe THEN k.period_spent ELSE 0 END AS spent, b.kpe
          FROM api_keys k JOIN (SELECT hookline_key_period_end(pe, ${at}) AS kpe FROM old) b ON true
         WHERE k.id = ${keyId}
           FOR NO KEY UPDATE OF k
      )`

/**
 * src/Ledger/RepoSql.ts `debitStatement`, the statement and its parameters in the same order:
 * `reserve` with a hold id, `charge` (taken at once, no hold) with null.
 */
export const reserveStatement = (
  accountId: string,
  amount: number,
  options: ReserveOptions,
  holdId: string | null,
  expiresInSeconds: number | null
) => {
  const debit = {
    operation: options.operation,
    referenceId: options.referenceId ?? null,
    requestId: options.requestId ?? null,
    keyId: options.keyId ?? null
  }
  const operation = debit.operation
  const now = new Date()
  const at = sql`${now}::timestamptz`
  const expiresAt = expiresInSeconds === null ? sql`NULL::timestamptz` : sql`${sql`${now}::timestamptz`} + make_interval(secs => ${expiresInSeconds})`
  const holdCte = holdId === null
    ? sql`hold AS (SELECT NULL::text AS id)`
    : sql`hold AS (
        INSERT INTO holds (id, account_id, monthly_amount, topup_amount, operation, reference_id, request_id, expires_at, period_end,
                           key_id, key_period_end, created_at, topup_grants)
        SELECT ${holdId}, ${accountId}, from_monthly, from_topup, ${operation},
               ${debit.referenceId}, ${debit.requestId}, ${expiresAt}, period_end, ${debit.keyId}, key_period_end, ${at},
               (SELECT grants FROM taken)
          FROM upd${expiresInSeconds === null ? sql`` : sql`, (SELECT set_config('synchronous_commit', 'off', true)) AS this_statement_only`}
        RETURNING id
      )`
  return sql`
    WITH old AS (
      SELECT monthly_balance AS m, topup_balance AS t, monthly_period_end AS pe, next_grant_expiry AS nge
        FROM wallets WHERE account_id = ${accountId} FOR UPDATE
    ),
    ${keyBudgetCte(debit.keyId, at)},
    upd AS (
      UPDATE wallets w
         SET monthly_balance = o.m - LEAST(o.m, ${amount}),
             topup_balance = o.t - (${amount} - LEAST(o.m, ${amount}))
        FROM old o LEFT JOIN budget k ON true
       WHERE w.account_id = ${accountId}
         AND o.m + o.t >= ${amount}
         AND (o.pe IS NULL OR o.pe > ${at})
         AND (o.nge IS NULL OR o.nge > ${at})
         AND (k.lim IS NULL OR k.spent + ${amount} <= k.lim)
      RETURNING LEAST(o.m, ${amount}) AS from_monthly, ${amount} - LEAST(o.m, ${amount}) AS from_topup,
                w.monthly_balance, w.topup_balance, o.t AS topup_before, o.pe AS period_end,
                k.spent AS key_spent, k.kpe AS key_period_end
    ),
    taken AS (
      SELECT hookline_take_topup(${accountId}, from_topup, ${at}) AS grants FROM upd WHERE from_topup > 0
    ),
    key_spend AS (
      UPDATE api_keys SET period_spent = u.key_spent + ${amount}, spend_period_end = u.key_period_end
        FROM upd u WHERE api_keys.id = ${debit.keyId} AND u.key_period_end IS NOT NULL
      RETURNING 1
    ),
    ${holdCte},
    journal AS (
      INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, hold_id, operation, reference_id, request_id, key_id,
                                  created_at)
      SELECT ${newId("txn")}, ${accountId}, 'reserve', 'monthly', -from_monthly, monthly_balance, topup_before,
             (SELECT id FROM hold), ${operation}, ${debit.referenceId}, ${debit.requestId}, ${debit.keyId}, ${at}
        FROM upd WHERE from_monthly > 0
      UNION ALL
      SELECT ${newId("txn")}, ${accountId}, 'reserve', 'topup', -from_topup, monthly_balance, topup_balance,
             (SELECT id FROM hold), ${operation}, ${debit.referenceId}, ${debit.requestId}, ${debit.keyId}, ${at}
        FROM upd, taken WHERE from_topup > 0
      RETURNING 1
    )
    SELECT (o.pe IS NOT NULL AND o.pe <= ${at}) AS rollover_due, (o.nge IS NOT NULL AND o.nge <= ${at}) AS expiry_due, u.monthly_balance, u.topup_balance,
           COALESCE(k.spent + ${amount} > k.lim, false) AS over_limit, k.lim AS spend_limit, k.kpe AS key_period_end
      FROM old o LEFT JOIN upd u ON true LEFT JOIN budget k ON true`
}

/** src/Ledger/RepoSql.ts `resolveStatement` (settle when status is "settled"), same statement and order. */
export const resolveStatement = (holdId: string, charge: number, status: "settled" | "refunded" | "voided") => {
  const at = sql`${new Date()}::timestamptz`
  return sql`
    WITH cur AS (
      SELECT account_id, monthly_period_end AS pe FROM wallets
       WHERE account_id = (SELECT account_id FROM holds WHERE id = ${holdId})
       FOR UPDATE
    ),
    h AS (
      UPDATE holds
         SET status = ${status},
             settled_monthly = LEAST(monthly_amount, ${charge}),
             settled_topup = ${charge} - LEAST(monthly_amount, ${charge}),
             resolved_at = ${at},
             history_seq = CASE WHEN ${status} = 'settled' AND ${charge} > 0 AND operation <> 'prediction'
                                THEN nextval(pg_get_serial_sequence('credit_journal', 'seq')) END
        FROM cur
       WHERE holds.id = ${holdId} AND holds.status = 'pending' AND ${charge} <= holds.monthly_amount + holds.topup_amount
      RETURNING holds.account_id, holds.operation, holds.reference_id, holds.request_id,
                holds.monthly_amount - LEAST(holds.monthly_amount, ${charge}) AS back_m,
                holds.topup_amount - (${charge} - LEAST(holds.monthly_amount, ${charge})) AS back_t,
                holds.period_end IS DISTINCT FROM cur.pe AS lapsed, holds.key_id, holds.key_period_end, holds.topup_grants
    ),
    gb AS (
      SELECT g.id, LEAST(g.n, GREATEST(0, h.back_t - g.after)) AS back
        FROM h CROSS JOIN LATERAL (
          SELECT e->>0 AS id, (e->>1)::bigint AS n,
                 COALESCE(sum((e->>1)::bigint) OVER (ORDER BY ord DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS after
            FROM jsonb_array_elements(h.topup_grants) WITH ORDINALITY AS x (e, ord)
        ) g
       WHERE h.back_t > 0
    ),
    kept AS (
      UPDATE topup_grants t SET remaining = t.remaining + gb.back FROM gb
       WHERE t.id = gb.id AND gb.back > 0 AND t.expired_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ${at})
      RETURNING gb.back
    ),
    k AS (
      SELECT h.*, CASE WHEN h.lapsed THEN 0 ELSE h.back_m END AS kept_m, COALESCE((SELECT sum(back) FROM kept), 0) AS kept_t FROM h
    ),
    w AS (
      UPDATE wallets SET monthly_balance = monthly_balance + k.kept_m, topup_balance = topup_balance + k.kept_t
        FROM k WHERE wallets.account_id = k.account_id
      RETURNING wallets.monthly_balance, wallets.topup_balance
    ),
    key_back AS (
      UPDATE api_keys SET period_spent = period_spent - (h.back_m + h.back_t)
        FROM h WHERE api_keys.id = h.key_id AND api_keys.spend_period_end = h.key_period_end AND h.back_m + h.back_t > 0
      RETURNING 1
    ),
    journal AS (
      INSERT INTO credit_journal (id, account_id, entry_type, bucket, amount, monthly_after, topup_after, hold_id, operation, reference_id, request_id, reason, key_id,
                                  created_at)
      SELECT ${newId("txn")}, k.account_id, 'release', 'topup', k.back_t, w.monthly_balance - k.kept_m, w.topup_balance + k.back_t - k.kept_t,
             ${holdId}, k.operation, k.reference_id, k.request_id, NULL, k.key_id, ${at}
        FROM k, w WHERE k.back_t > 0
      UNION ALL
      SELECT ${newId("txn")}, k.account_id, 'expire', 'topup', k.kept_t - k.back_t, w.monthly_balance - k.kept_m, w.topup_balance,
             ${holdId}, k.operation, k.reference_id, k.request_id, 'top-up grant expired while held', k.key_id, ${at}
        FROM k, w WHERE k.back_t > k.kept_t
      UNION ALL
      SELECT ${newId("txn")}, k.account_id, 'release', 'monthly', k.back_m, w.monthly_balance - k.kept_m + k.back_m, w.topup_balance,
             ${holdId}, k.operation, k.reference_id, k.request_id, NULL, k.key_id, ${at}
        FROM k, w WHERE k.back_m > 0
      UNION ALL
      SELECT ${newId("txn")}, k.account_id, 'expire', 'monthly', -k.back_m, w.monthly_balance, w.topup_balance,
             ${holdId}, k.operation, k.reference_id, k.request_id, 'monthly period ended while held', k.key_id, ${at}
        FROM k, w WHERE k.back_m > 0 AND k.lapsed
      RETURNING 1
    )
    SELECT ${charge}::int AS charged, w.monthly_balance, w.topup_balance, (SELECT operation FROM h) AS operation FROM w`
}

/** HOLD_TIMEOUT's default. */
const holdTimeoutSeconds = 10 * 60

export interface BaselineHold {
  readonly id: string
  readonly monthly: number
  readonly topup: number
}

/** The Ledger's reserve on a pool: the hold, or null when the wallet holds too little. */
export const reserve = async (pool: Pg.Pool, accountId: string, amount: number, options: ReserveOptions): Promise<BaselineHold | null> => {
  const holdId = newId("hold")
  const statement = reserveStatement(accountId, amount, options, holdId, holdTimeoutSeconds)
  const { rows } = await pool.query<{ monthly_balance: string | null; topup_balance: string | null }>(statement.text, statement.values)
  const row = rows[0]
  if (row === undefined) throw new Error(`No wallet for account ${accountId}`)
  if (row.monthly_balance === null || row.topup_balance === null) return null
  return { id: holdId, monthly: Number(row.monthly_balance), topup: Number(row.topup_balance) }
}

/** The Ledger's charge (taken at once, no hold) on a pool: the balances after, or null when short. */
export const charge = async (pool: Pg.Pool, accountId: string, amount: number, options: ReserveOptions) => {
  const statement = reserveStatement(accountId, amount, options, null, holdTimeoutSeconds)
  const { rows } = await pool.query<{ monthly_balance: string | null; topup_balance: string | null }>(statement.text, statement.values)
  const row = rows[0]
  if (row === undefined) throw new Error(`No wallet for account ${accountId}`)
  if (row.monthly_balance === null || row.topup_balance === null) return null
  return { monthly: Number(row.monthly_balance), topup: Number(row.topup_balance) }
}

/** The Ledger's settle on a pool: the balances after, or null when the hold was not pending. */
export const settle = async (pool: Pg.Pool, holdId: string, charge: number) => {
  const statement = resolveStatement(holdId, charge, "settled")
  const { rows } = await pool.query<{ charged: number; monthly_balance: string; topup_balance: string }>(statement.text, statement.values)
  const row = rows[0]
  return row === undefined ? null : { charged: row.charged, monthly: Number(row.monthly_balance), topup: Number(row.topup_balance) }
}

export interface Caller {
  readonly keyId: string
  readonly accountId: string
  readonly plan: string
  readonly suspended: boolean
  readonly scopes: ReadonlyArray<string>
}

export interface BaselineContext {
  readonly pool: Pg.Pool
  /** The bearer key's owner, or a ready error response (401/403), as Hookline decides. */
  readonly authenticate: (request: Request, url: URL, scope: string | null) => Promise<Caller | Response>
  readonly json: (body: unknown, status?: number, headers?: Record<string, string>) => Response
}

export type BaselineHandler = (request: Request, url: URL, params: Record<string, string>) => Promise<Response>

/** A route module's default export: its routes, keyed "METHOD /path/:param". */
export type BaselineRouteModule = (context: BaselineContext) => Record<string, BaselineHandler>

const apiKeyPattern = /^hkl_live_[A-Za-z0-9_-]{16,}$/
const apiPlans = new Set(["pro", "business", "enterprise", "invite", "complimentary", "custom"])

const makeContext = (pool: Pg.Pool, cacheTtlMs: number): BaselineContext => {
  const cache = new Map<string, { readonly owner: Caller | null; readonly expires: number }>()
  const lookup = async (hash: string): Promise<Caller | null> => {
    const cached = cache.get(hash)
    if (cached !== undefined && cached.expires > Date.now()) return cached.owner
    const { rows } = await pool.query<{ key_id: string; account_id: string; plan: string; suspended: boolean; scopes: Array<string> }>(
      `
        SELECT k.id AS key_id, k.account_id, a.plan, a.suspended, k.scopes
          FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.key_hash = $1 AND k.revoked_at IS NULL`,
      [hash]
    )
    const row = rows[0]
    const owner = row === undefined
      ? null
      : { keyId: row.key_id, accountId: row.account_id, plan: row.plan, suspended: row.suspended, scopes: row.scopes }
    cache.set(hash, { owner, expires: Date.now() + cacheTtlMs })
    return owner
  }
  const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
    new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } })
  const error = (status: number, type: string, message: string) =>
    json({ error: { type, message, request_id: newId("req") } }, status)
  return {
    pool,
    json,
    authenticate: async (request, url, scope) => {
      if (url.searchParams.has("api_key") || url.searchParams.has("key")) return error(401, "invalid_api_key", "Key in query.")
      const match = /^Bearer (\S+)$/.exec(request.headers.get("authorization") ?? "")
      if (match === null || !apiKeyPattern.test(match[1])) return error(401, "invalid_api_key", "Malformed API key.")
      const owner = await lookup(createHash("sha256").update(match[1]).digest("hex"))
      if (owner === null) return error(401, "invalid_api_key", "Unknown or revoked API key.")
      if (owner.suspended) return error(403, "account_suspended", "This account is suspended.")
      if (scope !== null && !apiPlans.has(owner.plan)) return error(403, "api_not_enabled", "No API access.")
      if (scope !== null && !owner.scopes.includes(scope)) return error(403, "api_not_enabled", "Missing scope.")
      return owner
    }
  }
}

/** Wallet and categories: the routes this file's scenarios measure. */
const coreRoutes: BaselineRouteModule = ({ pool, authenticate, json }) => ({
  "GET /v1/wallet": async (request, url) => {
    const caller = await authenticate(request, url, null)
    if (caller instanceof Response) return caller
    const { rows } = await pool.query<{ monthly_balance: string; topup_balance: string; monthly_period_end: Date | null }>(
      "SELECT monthly_balance, topup_balance, monthly_period_end FROM wallets WHERE account_id = $1",
      [caller.accountId]
    )
    const row = rows[0]
    return json({
      object: "wallet",
      monthly_balance: Number(row.monthly_balance),
      monthly_period_end: row.monthly_period_end?.toISOString() ?? null,
      topup_balance: Number(row.topup_balance)
    })
  },
  "GET /v1/hooks/categories": async (request, url) => {
    const caller = await authenticate(request, url, null)
    if (caller instanceof Response) return caller
    const { rows } = await pool.query<{ slug: string; name: string }>("SELECT slug, name FROM categories ORDER BY name, slug")
    return json({ object: "list", data: rows.map(({ slug, name }) => ({ slug, name })), has_more: false, next_cursor: null })
  },
  "GET /healthz": async () => json({ status: "ok" })
})

interface CompiledRoute {
  readonly method: string
  readonly segments: ReadonlyArray<string>
  readonly handler: BaselineHandler
}

const compileRoutes = (table: Record<string, BaselineHandler>): Array<CompiledRoute> =>
  Object.entries(table)
    .map(([key, handler]) => {
      const [method, path] = key.split(" ")
      return { method, segments: path.split("/"), handler }
    })
    // Literal routes before parameter routes, as a router would.
    .sort((a, b) => a.segments.filter((s) => s.startsWith(":")).length - b.segments.filter((s) => s.startsWith(":")).length)

const match = (route: CompiledRoute, method: string, segments: ReadonlyArray<string>) => {
  if (route.method !== method || route.segments.length !== segments.length) return null
  const params: Record<string, string> = {}
  for (let i = 0; i < segments.length; i++) {
    const expected = route.segments[i]
    if (expected.startsWith(":")) params[expected.slice(1)] = decodeURIComponent(segments[i])
    else if (expected !== segments[i]) return null
  }
  return params
}

if (import.meta.main) {
  const pool = new Pg.Pool({
    connectionString: process.env.DATABASE_URL,
    max: Number(process.env.PG_MAX_CONNECTIONS ?? 10),
    application_name: "hookline-baseline"
  })
  pool.on("error", () => {})
  const context = makeContext(pool, Number(process.env.BASELINE_AUTH_CACHE_TTL_MS ?? 500))
  const table: Record<string, BaselineHandler> = { ...coreRoutes(context) }
  for (const module of (process.env.BASELINE_ROUTES ?? "").split(",").filter((entry) => entry !== "")) {
    const routes = ((await import(module)) as { default: BaselineRouteModule }).default
    Object.assign(table, routes(context))
  }
  const routes = compileRoutes(table)
  const server = Bun.serve({
    port: Number(process.env.PORT ?? 0),
    hostname: "127.0.0.1",
    maxRequestBodySize: 300 * 1024 * 1024,
    fetch: async (request) => {
      const url = new URL(request.url)
      const segments = url.pathname.split("/")
      for (const route of routes) {
        const params = match(route, request.method, segments)
        if (params !== null) {
          try {
            return await route.handler(request, url, params)
          } catch (cause) {
            console.error(cause)
            return context.json({ error: { type: "internal_error", message: "Internal error", request_id: newId("req") } }, 500)
          }
        }
      }
      return context.json({ error: { type: "not_found", message: "No route", request_id: newId("req") } }, 404)
    }
  })
  const stop = () => {
    server.stop(true)
    void pool.end().finally(() => process.exit(0))
  }
  process.on("SIGTERM", stop)
  process.on("SIGINT", stop)
}
