/**
 * The errors every endpoint may answer with, whatever it declares: an HttpApiMiddleware added to
 * the whole API (src/Api.ts), implemented in src/System/Envelope.ts. Its own file, so the API
 * definition imports nothing that reads the API back.
 */
import { HttpApiMiddleware } from "effect/http-api"
import {
  DatabaseUnavailableWire,
  InternalErrorWire,
  NotFoundWire,
  PayloadTooLargeWire,
  StatementTimedOutWire,
  UnsupportedMediaTypeWire,
  ValidationFailedWire
} from "../Errors.js"

export class ApiErrors extends HttpApiMiddleware.Service<ApiErrors>()("hookline/ApiErrors", {
  error: [ValidationFailedWire, NotFoundWire, PayloadTooLargeWire, UnsupportedMediaTypeWire, InternalErrorWire, StatementTimedOutWire, DatabaseUnavailableWire]
}) {}
