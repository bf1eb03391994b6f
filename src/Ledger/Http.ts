/** The wallet routes: each decodes, makes one Ledger service call for the caller's account, and answers. */
import { Effect, Option } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { HooklineApi } from "../Api.js"
import { CurrentCaller } from "../Auth/Api.js"
import { NotFound } from "../Errors.js"
import { grantsListed, topupGrantListOf, walletOf } from "./Api.js"
import { WalletAlerts } from "./Alerts.js"
import { KeyBudgets } from "./Budgets.js"
import { CreditHistory } from "./History.js"
import { Ledger } from "./Ledger.js"
import { Usage } from "./Usage.js"

export const WalletHandlers = HttpApiBuilder.group(HooklineApi, "wallet", (handlers) =>
  Effect.gen(function*() {
    const ledger = yield* Ledger
    const history = yield* CreditHistory
    const usage = yield* Usage
    const alerts = yield* WalletAlerts
    const budgets = yield* KeyBudgets
    const forCaller = <A, E, R>(call: (accountId: string) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(CurrentCaller, (caller) => call(caller.accountId))
    return handlers
      .handle("get", () => forCaller((accountId) => Effect.map(ledger.wallet(accountId), walletOf)))
      .handle("grants", () => forCaller((accountId) => Effect.map(ledger.topupGrants(accountId, grantsListed), topupGrantListOf)))
      .handle("transactions", ({ query }) => forCaller((accountId) => history.list(accountId, query, "wallet.transactions")))
      .handle("usage", ({ query }) => forCaller((accountId) => usage.summarise(accountId, query)))
      .handle("currentKey", () =>
        Effect.flatMap(CurrentCaller, (caller) => budgets.read(caller.keyId)).pipe(
          // The key authenticated this request: it exists.
          Effect.flatMap(Option.match({ onNone: () => Effect.die(new NotFound({ message: "No such key." })), onSome: Effect.succeed }))
        ))
      .handle("alert", () => forCaller(alerts.get))
      .handle("setAlert", ({ payload }) => forCaller((accountId) => alerts.set(accountId, payload.threshold)))
      .handle("clearAlert", () => forCaller(alerts.clear))
  })
)
