/**
 * `effect/persistence`'s Redis service over Bun's own Redis client (`Bun.RedisClient`), for the
 * rate limit store shared by several server processes (REDIS_URL).
 *
 * A command never waits in an offline queue or on the client's own reconnection backoff: while
 * Redis refuses connections it fails at once; the next command connects again. A Redis that
 * accepts but does not answer would hold a command until the connection timeout: the rate
 * limiter's deadline per call (FailoverStore.ts) bounds what a request waits.
 */
import { Effect, Layer } from "effect"
import { Redis } from "effect/persistence"

/** How long to wait for Redis to accept a connection before a command fails. */
const connectionTimeoutMillis = 2_000

const open = (url: string) =>
  new Bun.RedisClient(url, { enableOfflineQueue: false, connectionTimeout: connectionTimeoutMillis, maxRetries: 0 })

const sendOn = (client: Bun.RedisClient) => <A = unknown>(command: string, ...args: ReadonlyArray<string>): Effect.Effect<A, Redis.RedisError> =>
  Effect.tryPromise({
    // Bun types every reply as `any`: the caller names what its command returns.
    try: async (): Promise<A> => {
      if (!client.connected) await client.connect()
      return client.send(command, [...args])
    },
    catch: (cause) => new Redis.RedisError({ cause })
  })

/** A further connection (the service's pool reserves them for multi-command work). */
const connect = (url: string) =>
  Effect.sync(() => {
    const client = open(url)
    return { send: sendOn(client), close: Effect.sync(() => client.close()) }
  })

const make = (url: string) =>
  Effect.gen(function*() {
    const client = yield* Effect.acquireRelease(Effect.sync(() => open(url)), (client) => Effect.sync(() => client.close()))
    return yield* Redis.make({
      send: sendOn(client),
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
  })

/** The Redis service on `url` (redis:// or rediss://), closed with the layer's scope. */
export const layerBunRedis = (url: string): Layer.Layer<Redis.Redis> => Layer.effect(Redis.Redis, make(url))
