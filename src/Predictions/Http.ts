import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { RequestId } from "../Errors.js"
import { idempotent } from "../Idempotency/Idempotent.js"
import { creditHeaders } from "../Ledger/Metering.js"
import { Predictions } from "./Predictions.js"

export const PredictHandlers = HttpApiBuilder.group(HooklineApi, "predict", (handlers) =>
  Effect.gen(function*() {
    const predictions = yield* Predictions
    return handlers
      .handle("createUpload", () => idempotent(Effect.flatMap(CurrentCaller, predictions.createUpload)))
      .handle("retryStart", ({ payload }) =>
        idempotent(
          Effect.gen(function*() {
            const caller = yield* CurrentCaller
            const outcome = yield* predictions.retryStart(caller, payload.upload_id, yield* RequestId)
            yield* creditHeaders(outcome.charged, outcome.balances)
            return outcome.prediction
          }),
          payload
        ))
      .handle("get", ({ path }) => Effect.flatMap(CurrentCaller, (caller) => predictions.get(caller, path.id)))
  })
)

export const UploadHandlers = HttpApiBuilder.group(HooklineApi, "upload", (handlers) =>
  Effect.gen(function*() {
    const predictions = yield* Predictions
    return handlers.handle("put", ({ path }) => predictions.receiveUpload(path.token))
  })
)
