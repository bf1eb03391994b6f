/**
 * AccountsRepo in memory: the same methods as the PostgreSQL repository, over a Map, with time
 * from Effect's Clock. For tests of the account rules that need no database; the PostgreSQL
 * repository remains the proof of the SQL.
 *
 * What differs: `findAccount`'s `lock` takes no row lock (one fiber at a time changes the map).
 */
import { Clock, Effect, Layer, Option } from "effect"
import type { Plan } from "../Auth/Domain.js"
import { AccountsRepo } from "./Repo.js"

export interface MemoryAccount {
  readonly id: string
  name: string | null
  plan: Plan
  suspended: boolean
  monthlyGrant: number
  readonly createdAt: number
  updatedAt: number
}

export interface MemoryAccountsState {
  /** By account id; KeysRepo's memory joins keys to these rows (see src/Auth/RepoMemory.ts). */
  accounts: Map<string, MemoryAccount>
}

type Repo = AccountsRepo["Service"]

const toRow = (account: MemoryAccount) => ({
  id: account.id,
  name: account.name,
  plan: account.plan,
  suspended: account.suspended,
  monthly_grant: account.monthlyGrant
})

/** A fresh in-memory accounts table (optionally seeded): its layer, and its state for a test to read. */
export const makeAccountsRepoInMemory = (seed: ReadonlyArray<MemoryAccount> = []) => {
  const state: MemoryAccountsState = { accounts: new Map(seed.map((account) => [account.id, { ...account }])) }

  /** Runs `change` on the account at the Clock's time; an unknown id changes nothing, as an UPDATE matching no row. */
  const update = (id: string, change: (account: MemoryAccount) => void) =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const account = state.accounts.get(id)
      if (account === undefined) return
      change(account)
      account.updatedAt = now
    })

  const repo: Repo = {
    findAccount: (id, _lock) => Effect.sync(() => Option.map(Option.fromNullishOr(state.accounts.get(id)), toRow)),
    insertAccount: ({ id, monthlyGrant, name, plan }) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        // The primary key and `CHECK (monthly_grant >= 0)`: violations are defects, as the SQL error is at the boundary.
        if (state.accounts.has(id)) return Effect.die(new Error(`duplicate account id ${id}`))
        if (monthlyGrant < 0) return Effect.die(new Error(`monthly_grant must be >= 0, got ${monthlyGrant}`))
        state.accounts.set(id, { id, name, plan, suspended: false, monthlyGrant, createdAt: now, updatedAt: now })
        return Effect.void
      }),
    setSuspended: (id, suspended) => update(id, (account) => void (account.suspended = suspended)),
    changePlan: (id, plan, monthlyGrant) =>
      Effect.suspend(() =>
        // The CHECK is only met by a row the UPDATE matches.
        state.accounts.has(id) && monthlyGrant < 0
          ? Effect.die(new Error(`monthly_grant must be >= 0, got ${monthlyGrant}`))
          : update(id, (account) => {
            account.plan = plan
            account.monthlyGrant = monthlyGrant
          })
      )
  }
  return { layer: Layer.succeed(AccountsRepo, repo), state }
}
