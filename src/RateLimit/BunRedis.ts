/**
 * `effect/persistence`'s Redis service over Bun's own Redis client (`Bun.RedisClient`), for the
 * rate limit store shared by several server processes (REDIS_URL).
 *
 * A command never waits in an offline queue or on the client's own reconnection backoff: while
 * Redis refuses connections it fails at once; the next command connects again. A Redis that
 * accepts but does not answer would hold a command until the connection timeout: the rate
 * limiter's deadline per call (FailoverStore.ts) bounds what a request waits.
 *
 * A connection can go silent without closing (a frozen server, a network that drops its packets):
 * its commands then wait until the kernel gives up on the socket, minutes later. So the service
 * can drop its connection and take a new one (`renew`), and can ask Redis on a connection of its
 * own (`pingFresh`), which a dead connection cannot answer for.
 */
import { Effect } from "effect"
import { Redis } from "effect/persistence"

/** How long to wait for Redis to accept a connection before a command fails. */
const connectionTimeoutMillis = 2_000

const open = (url: string) =>
  new Bun.RedisClient(url, { enableOfflineQueue: false, connectionTimeout: connectionTimeoutMillis, maxRetries: 0 })

const sendOn = (clientOf: () => Bun.RedisClient) => <A = unknown>(command: string, ...args: ReadonlyArray<string>): Effect.Effect<A, Redis.RedisError> =>
  Effect.tryPromise({
    // Bun types every reply as `any`: the caller names what its command returns.
    try: async (): Promise<A> => {
      const client = clientOf()
      if (!client.connected) await client.connect()
      return client.send(command, [...args])
    },
    catch: (cause) => new Redis.RedisError({ cause })
  })

/** A further connection (the service's pool reserves them for multi-command work). */
const connect = (url: string) =>
  Effect.sync(() => {
    const client = open(url)
    return { send: sendOn(() => client), close: Effect.sync(() => client.close()) }
  })

export interface BunRedis {
  readonly redis: Redis.Redis["Service"]
  /** Closes the current connection (its commands in flight fail) and opens a new one for the next command. */
  readonly renew: Effect.Effect<void>
  /** PING on a new connection of its own, closed afterwards. */
  readonly pingFresh: Effect.Effect<unknown, Redis.RedisError>
}

/** The Redis service on `url` (redis:// or rediss://); its connections are closed with the scope. */
export const makeBunRedis = (url: string) =>
  Effect.gen(function*() {
    let client = open(url)
    yield* Effect.addFinalizer(() => Effect.sync(() => client.close()))
    const redis = yield* Redis.make({
      send: sendOn(() => client),
      connect: connect(url),
      subscribe: (channel, onMessage) =>
        Effect.gen(function*() {
          // A subscribed connection takes no other commands: each subscription has its own.
          const subscriber = yield* Effect.acquireRelease(Effect.sync(() => open(url)), (own) => Effect.sync(() => own.close()))
          yield* Effect.tryPromise({
            try: () => subscriber.subscribe(channel, (message, from) => onMessage({ channel: from, message })),
            catch: (cause) => new Redis.RedisError({ cause })
          })
          // Messages arrive through the listener until the scope closes the connection.
          return Effect.never
        })
    })
    const renew = Effect.sync(() => {
      const old = client
      client = open(url)
      old.close()
    })
    const pingFresh = Effect.acquireUseRelease(
      Effect.sync(() => open(url)),
      (fresh) => sendOn(() => fresh)("PING"),
      (fresh) => Effect.sync(() => fresh.close())
    )
    return { redis, renew, pingFresh } satisfies BunRedis
  })
