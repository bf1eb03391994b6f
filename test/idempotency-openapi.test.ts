/**
 * The endpoints that honour Idempotency-Key, as /openapi.json shows them. A stored answer repeats
 * the first answer's status and media type as IdempotentEndpoint states them (200, JSON), so each
 * such endpoint must answer exactly that; each documents the header and its 409; and no endpoint
 * documents the header without honouring it.
 */
import { describe, expect, test } from "bun:test"
import { OpenApi } from "effect/http-api"
import { HooklineApi } from "../src/Api.js"
import { declaredEndpoints } from "../src/ApiRoutes.js"
import { IdempotencyKeys } from "../src/Idempotency/Api.js"

interface Operation {
  readonly parameters?: ReadonlyArray<{ readonly name: string; readonly in: string }>
  readonly responses: Record<string, { readonly content?: Record<string, { readonly schema?: { readonly $ref?: string } }> }>
}

const document = OpenApi.fromApi(HooklineApi) as unknown as { readonly paths: Record<string, Record<string, Operation>> }
const operationOf = (method: string, path: string) => document.paths[path.replace(/:(\w+)/g, "{$1}")]?.[method.toLowerCase()]
const takesKey = (operation: Operation | undefined) =>
  (operation?.parameters ?? []).some((parameter) => parameter.in === "header" && parameter.name === "Idempotency-Key")

const idempotent = declaredEndpoints.filter((endpoint) => endpoint.middlewares.has(IdempotencyKeys))

describe("endpoints that honour Idempotency-Key", () => {
  test("are the POSTs the docs name", () => {
    expect(idempotent.map((endpoint) => `${endpoint.method} ${endpoint.path}`).toSorted()).toEqual([
      "POST /admin/accounts",
      "POST /admin/accounts/:id/credits",
      "POST /admin/accounts/:id/keys",
      "POST /v1/predict",
      "POST /v1/predict/upload",
      "POST /v1/webhooks/rotate",
      "POST /v1/webhooks/test"
    ])
  })

  test("answer success with 200 JSON only, document the header and the 409 idempotency_in_progress", () => {
    for (const endpoint of idempotent) {
      const operation = operationOf(endpoint.method, endpoint.path)
      expect(operation).toBeDefined()
      const responses = operation?.responses ?? {}
      expect(Object.keys(responses).filter((status) => status.startsWith("2"))).toEqual(["200"])
      expect(Object.keys(responses["200"].content ?? {})).toEqual(["application/json"])
      expect(responses["409"]?.content?.["application/json"]?.schema?.$ref).toBe("#/components/schemas/Error_idempotency_in_progress")
      expect(takesKey(operation)).toBe(true)
    }
  })

  test("no other endpoint documents the header", () => {
    const others = declaredEndpoints.filter((endpoint) => !endpoint.middlewares.has(IdempotencyKeys))
    expect(others.filter((endpoint) => takesKey(operationOf(endpoint.method, endpoint.path))).map((endpoint) => endpoint.path)).toEqual([])
  })
})
