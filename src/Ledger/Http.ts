import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { walletOf } from "./Api.js"
import { CreditHistory } from "./History.js"
import { Ledger } from "./Ledger.js"
import { Usage } from "./Usage.js"
import { WalletAlerts } from "./Alerts.js"

export const WalletHandlers = HttpApiBuilder.group(HooklineApi, "wallet", (handlers) =>
  Effect.gen(function*() {
    const ledger = yield* Ledger
    const history = yield* CreditHistory
    const usage = yield* Usage
    const alerts = yield* WalletAlerts
    return handlers
      .handle("get", () => Effect.flatMap(CurrentCaller, (caller) => Effect.map(ledger.wallet(caller.accountId), walletOf)))
      .handle("transactions", ({ query }) =>
        Effect.flatMap(CurrentCaller, (caller) =>
          // Reading the wallet first applies a rollover that is due, so its expiry and grant are listed.
          ledger.wallet(caller.accountId).pipe(
            Effect.andThen(history.list(caller.accountId, query, "wallet.transactions"))
          )))
      .handle("usage", ({ query }) =>
        Effect.flatMap(CurrentCaller, (caller) =>
          ledger.wallet(caller.accountId).pipe(Effect.andThen(usage.summarise(caller.accountId, query)))))
      .handle("alert", () => Effect.flatMap(CurrentCaller, (caller) => alerts.get(caller.accountId)))
      // Reading the wallet first applies a rollover that is due, so the threshold is judged against today's balance.
      .handle("setAlert", ({ payload }) =>
        Effect.flatMap(CurrentCaller, (caller) =>
          ledger.wallet(caller.accountId).pipe(Effect.andThen(alerts.set(caller.accountId, payload.threshold)))))
      .handle("clearAlert", () => Effect.flatMap(CurrentCaller, (caller) => alerts.clear(caller.accountId)))
  })
)
