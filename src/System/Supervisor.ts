/**
 * Several server processes from one command: with WEB_CONCURRENCY=N above 1, `bun src/main.ts`
 * becomes a small supervisor that starts N children (`bun src/main.ts` again, each told its index
 * in HOOKLINE_PROCESS_INDEX), and each child's `Bun.serve` listens with `reusePort: true`, so the
 * kernel (SO_REUSEPORT, Linux) spreads new connections over them. The supervisor serves nothing
 * and opens no database: it never loads the application's modules (~75 MB of memory).
 *
 * Why child processes and not `node:cluster`: under Bun 1.4.5 `cluster.fork()` works, but its
 * primary does not share a listening socket with its workers (they still need `reusePort`), so
 * it would add a fork protocol and a worker state machine for nothing `Bun.spawn` lacks; the
 * spawned child's `exited` promise, its pid and its signals are all the supervisor needs.
 *
 * Background work is not elected: every child runs all of it (job workers, the webhook
 * dispatcher, the sweepers), as separate processes on one database always have. Each job,
 * delivery, hold, idempotency key and due wallet is claimed with `FOR UPDATE SKIP LOCKED` or a
 * guarded `UPDATE`, so N children do each piece of work once (test/multiprocess.test.ts).
 *
 * - A child that dies is replaced after WEB_RESTART_DELAY, doubled at each death in a row up to
 *   WEB_RESTART_MAX_DELAY (a crash loop waits, it does not spin); a child that lived
 *   WEB_RESTART_MAX_DELAY resets the wait.
 * - SIGTERM or SIGINT to the supervisor sends SIGTERM once to every child, which drains as a
 *   single process does (src/System/Shutdown.ts); once all have exited the supervisor logs
 *   `Hookline stopped` and exits 0. A further signal is passed on (a child then exits at once).
 *   Children run in their own process group, so a terminal's Ctrl-C reaches the supervisor only
 *   and each child gets one signal, not two.
 * - A child whose supervisor is gone (SIGKILL) loses its IPC channel and stops itself.
 * - N > 1 refuses to start with the embedded database (one process per data directory) and
 *   without REDIS_URL while rate limits are on (each child would count alone: N times the limit).
 */
import { Cause, Config, Data, Duration, Effect, Exit, Option, Runtime } from "effect"
import { NodeRuntime } from "@effect/platform-node"
import { fileURLToPath } from "node:url"
import { ProcessesConfig, ServerConfig } from "../Config.js"
import { LoggingLive } from "../Logging.js"
import { ServerStartFailed } from "./Listen.js"

/** A setting that makes N processes unsafe: the message says why and what to set. */
export class SupervisorRefused extends Data.TaggedError("SupervisorRefused")<{ readonly message: string }> {
  override readonly [Runtime.errorReported] = false
}

const entry = fileURLToPath(new URL("../main.ts", import.meta.url))

/** What N > 1 needs; the first missing part refuses the start. */
const SupervisorConfig = Config.all({
  server: ServerConfig,
  processes: ProcessesConfig,
  redisUrl: Config.option(Config.String("REDIS_URL")),
  rateLimitEnabled: Config.Boolean("RATE_LIMIT_ENABLED").pipe(Config.withDefault(true)),
  metricsPort: Config.option(Config.Int("METRICS_PORT")),
  workerConcurrency: Config.option(Config.Int("WORKER_CONCURRENCY"))
})
type SupervisorConfig = Config.Success<typeof SupervisorConfig>

export const refusal = (config: SupervisorConfig): string | null => {
  const n = config.processes.processes
  if (Option.isNone(config.server.databaseUrl)) {
    return `WEB_CONCURRENCY=${n} starts ${n} processes, and the embedded database (no DATABASE_URL) belongs to one process: ` +
      "set DATABASE_URL to a PostgreSQL server they share, or WEB_CONCURRENCY=1."
  }
  if (config.rateLimitEnabled && Option.isNone(config.redisUrl)) {
    return `WEB_CONCURRENCY=${n} starts ${n} processes, and without REDIS_URL each counts rate limits alone (a key would get ${n} times its limit): ` +
      "set REDIS_URL to a Redis they share, or WEB_CONCURRENCY=1."
  }
  if (config.server.port === 0) return `WEB_CONCURRENCY=${n} needs a fixed PORT for its processes to share (PORT=0 picks one per process).`
  return null
}

/** A child's environment: its index, its own metrics port, and its share of the cores for scoring. */
const childEnvironment = (config: SupervisorConfig, index: number): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined) env[name] = value
  env["HOOKLINE_PROCESS_INDEX"] = String(index)
  if (Option.isSome(config.metricsPort)) env["METRICS_PORT"] = String(config.metricsPort.value + index)
  if (Option.isNone(config.workerConcurrency)) {
    env["WORKER_CONCURRENCY"] = String(Math.max(1, Math.floor(navigator.hardwareConcurrency / config.processes.processes)))
  }
  return env
}

/** The port is free (nothing else, Hookline or not, listens on it without sharing): checked once before the children start. */
const probePort = (port: number, hostname: string) =>
  Effect.try({
    try: () => Bun.serve({ port, hostname, fetch: () => new Response() }).stop(true),
    catch: (cause) => new ServerStartFailed({ port, cause })
  })

type Child = ReturnType<typeof Bun.spawn>

/** The children alive now, for a further signal to reach. */
const alive = new Set<Child>()

/** One child, from spawn to exit; interrupted, it is sent SIGTERM and waited for (its drain). */
const runChild = (config: SupervisorConfig, index: number) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const child = Bun.spawn([process.execPath, entry], {
        env: childEnvironment(config, index),
        stdio: ["ignore", "inherit", "inherit"],
        detached: true,
        ipc: () => {}
      })
      alive.add(child)
      return child
    }),
    (child) =>
      Effect.logInfo("server process started").pipe(
        Effect.annotateLogs({ process: index, pid: child.pid }),
        Effect.andThen(Effect.promise(() => child.exited)),
        Effect.map((code) => ({ pid: child.pid, code, signal: child.signalCode }))
      ),
    (child) =>
      Effect.promise(async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM")
        await child.exited
        alive.delete(child)
      })
  )

/** Keeps child `index` running: replaced when it dies, after a wait that grows while it keeps dying. */
const slot = (config: SupervisorConfig, index: number) =>
  Effect.gen(function*() {
    const { restartDelay, restartMaxDelay } = config.processes
    let wait = restartDelay
    for (;;) {
      const started = Date.now()
      const ended = yield* runChild(config, index)
      if (Date.now() - started >= Duration.toMillis(restartMaxDelay)) wait = restartDelay
      yield* Effect.logError("server process exited; replacing it").pipe(
        Effect.annotateLogs({ process: index, pid: ended.pid, exit_code: ended.code, signal: ended.signal ?? "none", restart_in: Duration.format(wait) })
      )
      yield* Effect.sleep(wait)
      wait = Duration.min(Duration.times(wait, 2), restartMaxDelay)
    }
  })

const supervise = Effect.gen(function*() {
  const config = yield* SupervisorConfig
  const refused = refusal(config)
  if (refused !== null) return yield* new SupervisorRefused({ message: refused })
  yield* probePort(config.server.port, config.server.host).pipe(Effect.mapError((failed) => new SupervisorRefused({ message: failed.message })))
  // The first signal interrupts this fiber (runMain): each child gets SIGTERM from its slot's release.
  // Any later one is passed on, so a second Ctrl-C still stops the children at once.
  let signals = 0
  const passOn = (signal: NodeJS.Signals) => () => {
    if (++signals > 1) for (const child of alive) child.kill(signal)
  }
  process.on("SIGTERM", passOn("SIGTERM"))
  process.on("SIGINT", passOn("SIGINT"))
  yield* Effect.logInfo("starting server processes").pipe(
    Effect.annotateLogs({ processes: config.processes.processes, port: config.server.port })
  )
  yield* Effect.forEach(Array.from({ length: config.processes.processes }, (_, index) => index), (index) => slot(config, index), {
    concurrency: "unbounded",
    discard: true
  })
})

/** An interruption (the signal) exits 0 once every child has exited; a refusal exits 1 with its one line (logged below). */
const teardown: Runtime.Teardown = (exit, onExit) =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)

/**
 * Decides what this `bun src/main.ts` is. Returns true when it is a supervisor (which then runs
 * until its children are stopped), false when it is a server: one on its own, or a supervised
 * child (which then stops itself when its supervisor disappears).
 */
export const superviseIfAsked = (): boolean => {
  // A setting that cannot be read is the supervisor's to report (it exits 1 saying which).
  const { processes, processIndex } = Effect.runSync(
    Effect.orElseSucceed(ProcessesConfig, () => ({ processes: 2, processIndex: Option.none<number>() }))
  )
  if (Option.isSome(processIndex)) {
    process.on("disconnect", () => process.kill(process.pid, "SIGTERM"))
    return false
  }
  if (processes <= 1) return false
  supervise.pipe(
    Effect.onInterrupt(() => Effect.logInfo("Hookline stopped")),
    Effect.catchTag("SupervisorRefused", (refused) => Effect.logError(refused.message).pipe(Effect.andThen(Effect.fail(refused)))),
    Effect.provide(LoggingLive),
    NodeRuntime.runMain({ teardown })
  )
  return true
}
