/** The whole Hookline contract as one HttpApi: the server, the client and /openapi.json derive from it. */
import { HttpApi, OpenApi } from "effect/http-api"
import { AdminApi } from "./Admin/Api.js"
import { HooksApi } from "./Hooks/Api.js"
import { WalletApi } from "./Ledger/Api.js"
import { PredictApi, UploadApi } from "./Predictions/Api.js"
import { SystemApi } from "./System/Api.js"
import { ApiErrors } from "./System/ApiErrors.js"
import { WebhooksApi } from "./Webhooks/Api.js"

export class HooklineApi extends HttpApi.make("hookline")
  .add(WalletApi, HooksApi, PredictApi, UploadApi, WebhooksApi, AdminApi, SystemApi)
  // Added last, so it is every endpoint's outermost middleware and its errors are on every route.
  .middleware(ApiErrors)
  .annotate(OpenApi.Title, "Hookline API")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(OpenApi.Servers, [
    { url: "/", description: "The server this document was fetched from" },
    { url: "http://localhost:8080", description: "npm start on this machine (PORT 8080)" }
  ])
  .annotate(
    OpenApi.Description,
    "A metered API: a credit wallet, a searchable catalog of scored short-form video hooks, clip scoring and account webhooks. " +
      "Every /v1 request carries `Authorization: Bearer hkl_live_…`. Errors share one envelope " +
      "`{ error: { type, message, request_id } }`; every response carries X-Request-Id."
  )
  .annotate(OpenApi.Transform, (spec) => dropFrameworkDecodeError(spec))
{}

interface ResponseObject {
  description?: string
  content?: { "application/json"?: { schema?: { $ref?: string; anyOf?: Array<{ $ref?: string }> } } }
}

const decodeErrorRef = "#/components/schemas/HttpApiDecodeError"
const statementTimedOutRef = "#/components/schemas/Error_service_unavailable_statement_timed_out"

/**
 * The framework lists its own 400 decode error on every route; Hookline answers those as 422
 * validation_error, so the 400 entry keeps only Hookline's own 400s (invalid_cursor and the
 * upload's authorization_not_allowed). Two errors sharing 403 get one description; a 503 names
 * each of its causes.
 */
const dropFrameworkDecodeError = (spec: Record<string, unknown>): Record<string, unknown> => {
  const paths = spec.paths as Record<string, Record<string, { responses?: Record<string, ResponseObject> }>>
  const schemas = (spec.components as { schemas?: Record<string, { description?: string }> } | undefined)?.schemas ?? {}
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) {
      const responses = operation.responses
      if (responses === undefined) continue
      const bad = responses["400"]?.content?.["application/json"]?.schema
      if (bad !== undefined) {
        if (bad.$ref === decodeErrorRef) {
          delete responses["400"]
        } else if (bad.anyOf !== undefined) {
          const rest = bad.anyOf.filter((option) => option.$ref !== decodeErrorRef)
          responses["400"] = {
            description: "Invalid cursor, or a forbidden Authorization header on the upload.",
            content: { "application/json": { schema: rest.length === 1 ? rest[0] : { anyOf: rest } } }
          }
        }
      }
      const unavailable = responses["503"]
      const causes = unavailable?.content?.["application/json"]?.schema?.anyOf
      if (unavailable !== undefined && causes !== undefined) {
        // The route's own 503 first, then the statement timeout every route shares.
        unavailable.description = causes
          .map((option) => option.$ref ?? "")
          .toSorted((a, b) => Number(a === statementTimedOutRef) - Number(b === statementTimedOutRef))
          .map((ref) => schemas[ref.replace("#/components/schemas/", "")]?.description ?? "")
          .join(" Or: ")
      }
      const forbidden = responses["403"]?.content?.["application/json"]?.schema
      if (forbidden?.anyOf !== undefined && responses["403"] !== undefined) {
        responses["403"].description = "account_suspended: the account is suspended; api_not_enabled: the plan has no API access or the key lacks the route's scope."
      }
    }
  }
  const components = spec.components as {
    schemas?: Record<string, unknown>
    securitySchemes?: Record<string, { type?: string; scheme?: string }>
  } | undefined
  if (components?.schemas !== undefined) delete components.schemas["HttpApiDecodeError"]
  // HTTP auth scheme names are case-insensitive (RFC 9110 §11.1); OpenAPI's examples write them lower-case.
  for (const scheme of Object.values(components?.securitySchemes ?? {})) {
    if (scheme.type === "http" && scheme.scheme !== undefined) scheme.scheme = scheme.scheme.toLowerCase()
  }
  return spec
}
