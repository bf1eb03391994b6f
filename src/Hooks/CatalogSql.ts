/**
 * The catalog's statements as plain text with positional parameters. HookCatalog runs
 * them through SqlClient; the benchmark's bare baseline (bench/catalog.ts) sends the very
 * same text through `pg`, so the two are compared on identical database work.
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { HookRecord } from "./HookRecord.js"

/** Sort key above every real one (epoch ms of published_at; hooks without one use the floor). */
export const topSortMs = 9_000_000_000_000_000

const leanColumns = "h.id, h.text, h.platform, h.media_type, h.thumbnail_url, h.category, h.hook_duration_sec, h.published_at"

export const catalogVersionSql = "SELECT version FROM catalog_state"

/**
 * $1 normalised query, $2 after_k1, $3 after_k2, $4 after_id (all three null for the first page),
 * $5 rows wanted, $6 walk window (see hook_search_page). A query with no searchable word gets
 * substring matches instead (hook_substring_page, migrations/0006_substring_search.ts), k1 null.
 */
export const searchPageSql = `
  SELECT p.k1, p.k2, ${leanColumns}
    FROM hook_search_page($1::text, $2::real, $3::bigint, $4::text, $5::integer, $6::integer) WITH ORDINALITY AS p(id, k1, k2, ord)
    JOIN hooks h ON h.id = p.id
   ORDER BY p.ord`

/** $1 category, $2 after sort_ms ($2 = topSortMs and $3 = '' for the first page), $3 after id, $4 rows wanted. */
export const listPageSql = `
  SELECT s.sort_ms AS k2, ${leanColumns}
    FROM (SELECT id, sort_ms FROM hook_search
           WHERE category = $1::text AND (sort_ms, id) < ($2::bigint, $3::text)
           ORDER BY sort_ms DESC, id DESC LIMIT $4::integer) s
    JOIN hooks h ON h.id = s.id
   ORDER BY s.sort_ms DESC, s.id DESC`

/** $1 hook id. */
export const hookSql = `
  SELECT ${leanColumns}, h.source_url, h.caption, h.duration_sec, h.summary,
         h.emotions, h.comment_themes, h.metrics, h.creator, h.audio
    FROM hooks h WHERE h.id = $1::text`

/** $1 slug. */
export const categoryExistsSql = "SELECT EXISTS (SELECT 1 FROM categories WHERE slug = $1::text) AS found"

/**
 * Inserts or updates a batch of hooks, one array parameter per column ($1 … $17, in
 * `hookColumns` order). RETURNING tells inserted rows (xmax = 0) from updated ones.
 */
export const hookColumns = [
  "id", "text", "platform", "media_type", "thumbnail_url", "category", "hook_duration_sec", "published_at",
  "source_url", "caption", "duration_sec", "summary", "emotions", "comment_themes", "metrics", "creator", "audio"
] as const

/** The PostgreSQL type of each of `hookColumns`. */
export const hookColumnTypes = [
  "text", "text", "text", "text", "text", "text", "float8", "timestamptz",
  "text", "text", "float8", "text", "jsonb", "jsonb", "jsonb", "jsonb", "jsonb"
] as const

const jsonColumns: ReadonlySet<string> = new Set(["emotions", "comment_themes", "metrics", "creator", "audio"])

/**
 * A column's values as one typed array parameter: float8 columns bind as float8[], the others as
 * text[] that the statement casts (jsonb values as their JSON text). Typed explicitly because the
 * driver infers an array's type from its elements, and a column of nulls, or of whole and
 * fractional numbers, has no single inferred type.
 */
const columnParameter = (records: ReadonlyArray<HookRecord>, column: (typeof hookColumns)[number], type: string) => {
  const values = records.map((record) => {
    const value: unknown = record[column]
    return value === null || value === undefined ? null : jsonColumns.has(column) ? JSON.stringify(value) : type === "float8" ? value : String(value)
  })
  return Result.getOrThrow(PgTypes.array(values, type === "float8" ? PgTypes.OID.float8 : PgTypes.OID.text))
}

/** One typed array parameter per column, in hookColumns order (upsertHooksSql's $1 … $17; a batch's ids must be distinct). */
export const hookColumnParams = (records: ReadonlyArray<HookRecord>): Array<PgTypes.Parameter> =>
  hookColumns.map((column, i) => columnParameter(records, column, hookColumnTypes[i]))

const onConflictUpdate = `
  ON CONFLICT (id) DO UPDATE SET
    ${hookColumns.slice(1).map((column) => `${column} = EXCLUDED.${column}`).join(",\n    ")},
    updated_at = now()`

export const upsertHooksSql = `
  INSERT INTO hooks (${hookColumns.join(", ")})
  SELECT * FROM unnest(${hookColumnTypes.map((type, i) => `$${i + 1}::${type}[]`).join(", ")})
  ${onConflictUpdate}
  RETURNING (xmax = 0) AS inserted`

/**
 * Bulk import through a staging table (one per transaction, dropped at its end): records are
 * staged in large multi-row inserts, then written to the catalog by one set-based upsert, so the
 * search triggers run once per import instead of once per batch. `seq` keeps the order of the
 * input: of several records with one id, the last wins (as if imported one after the other).
 */
export const createImportStagingSql = `
  CREATE TEMP TABLE hook_import_staging (
    ${hookColumns.map((column, i) => `${column} ${hookColumnTypes[i]}`).join(", ")},
    seq bigint
  ) ON COMMIT DROP`

/**
 * Stages a batch: $1 … $17 one array per column (hookColumns order), $18 the seq of the record
 * before the first. Binary arrays cost the database less than parsing the batch as one JSON
 * document (json_populate_recordset): 200,000 demo hooks staged in ~3.0 s against ~4.5 s.
 */
export const stageHooksSql = `
  INSERT INTO hook_import_staging
  SELECT ${hookColumns.map((column) => `u.${column}`).join(", ")}, $${hookColumns.length + 1}::bigint + u.ord
    FROM unnest(${hookColumnTypes.map((type, i) => `$${i + 1}::${type}[]`).join(", ")}) WITH ORDINALITY AS u(${hookColumns.join(", ")}, ord)`

/** The staged records into the catalog, in id order (index pages are filled in order); answers how many ids were new. */
export const upsertStagedHooksSql = `
  WITH written AS (
    INSERT INTO hooks (${hookColumns.join(", ")})
    SELECT ${hookColumns.join(", ")} FROM (
      SELECT DISTINCT ON (id) * FROM hook_import_staging ORDER BY id, seq DESC
    ) latest
    ${onConflictUpdate}
    RETURNING (xmax = 0) AS inserted
  )
  SELECT count(*) FILTER (WHERE inserted)::int AS inserted FROM written`

/**
 * The hooks nearest to a line (migrations/0012_hook_neighbours.ts, src/Hooks/NeighbourRule.ts):
 * $1 the line's lexemes (lexemesParameter), $2 rows wanted, $3 rare budget, $4 common sample, $5 walk window.
 */
export const neighboursSql = `
  SELECT n.id, h.text, h.category, n.score
    FROM hook_neighbours($1::text[], $2::integer, $3::integer, $4::integer, $5::integer) WITH ORDINALITY AS n(id, score, sort_ms, ord)
    JOIN hooks h ON h.id = n.id
   ORDER BY n.ord`

/** A line's lexemes as one text[] parameter (typed: an empty array has no type to infer). */
export const lexemesParameter = (lexemes: ReadonlyArray<string>): PgTypes.Parameter =>
  Result.getOrThrow(PgTypes.array([...lexemes], PgTypes.OID.text))
