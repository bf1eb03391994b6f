/**
 * Structured logs: JSON lines with LOG_FORMAT=json (production), logfmt with LOG_FORMAT=logfmt,
 * readable lines otherwise. Every line logged while a request runs carries its `request_id`
 * (added here from the fiber's RequestId); the access line is the front door's (src/System/Server.ts).
 *
 * No code logs a key, a secret or a header. As a last line of defence every message and
 * annotation is also scrubbed of anything shaped like a Hookline credential.
 */
import { Config, ConfigError, Context, Effect, Either, FiberRef, FiberRefs, HashMap, Layer, Logger, LogLevel } from "effect"
import { RequestId } from "./Errors.js"

const levels: Record<string, LogLevel.LogLevel> = {
  all: LogLevel.All,
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warn: LogLevel.Warning,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  fatal: LogLevel.Fatal,
  none: LogLevel.None
}

/** LOG_LEVEL, case-insensitive: trace, debug, info (default), warning, error, fatal, none. */
export const LogLevelConfig = Config.string("LOG_LEVEL").pipe(
  Config.withDefault("info"),
  Config.mapOrFail((name) => {
    const level = levels[name.toLowerCase()]
    return level === undefined
      ? Either.left(ConfigError.InvalidData([], `LOG_LEVEL must be one of ${Object.keys(levels).join(", ")}`))
      : Either.right(level)
  })
)

/** API keys, webhook secrets and bearer credentials, by shape. */
const credentialPattern = /hkl_live_[A-Za-z0-9_-]+|whsec_[A-Za-z0-9+/=]+|(Bearer\s+)[A-Za-z0-9._~+/=-]+/g

export const redactCredentials = (text: string): string =>
  text.replace(credentialPattern, (_match, bearer: string | undefined) => `${bearer ?? ""}[REDACTED]`)

const redactValue = (value: unknown): unknown => (typeof value === "string" ? redactCredentials(value) : value)

/** The request id of the fiber that logs, when it serves a request (the front door provides it). */
const requestIdOf = (fiberRefs: FiberRefs.FiberRefs): string | null => {
  const id = Context.get(FiberRefs.getOrDefault(fiberRefs, FiberRef.currentContext), RequestId)
  return id === RequestId.defaultValue() ? null : id
}

/** The same logger, with the request id added to every line logged while a request runs. */
export const withRequestId = <Output>(logger: Logger.Logger<unknown, Output>): Logger.Logger<unknown, Output> =>
  Logger.mapInputOptions(logger, (options) => {
    const requestId = requestIdOf(options.context)
    return requestId === null || HashMap.has(options.annotations, "request_id")
      ? options
      : { ...options, annotations: HashMap.set(options.annotations, "request_id", requestId) }
  })

/** The same logger, with credential-shaped text in messages and annotations replaced. */
export const redacting = <Output>(logger: Logger.Logger<unknown, Output>): Logger.Logger<unknown, Output> =>
  Logger.mapInputOptions(logger, (options) => ({
    ...options,
    message: Array.isArray(options.message) ? options.message.map(redactValue) : redactValue(options.message),
    annotations: HashMap.map(options.annotations, redactValue)
  }))

export const LogFormatConfig = Config.literal("json", "pretty", "logfmt")("LOG_FORMAT").pipe(
  Config.withDefault("pretty" as const)
)

export const LoggingLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const format = yield* LogFormatConfig
    const level = yield* LogLevelConfig
    const logger = format === "json"
      ? Logger.withConsoleLog(Logger.jsonLogger)
      : format === "logfmt"
      ? Logger.withConsoleLog(Logger.logfmtLogger)
      : Logger.prettyLoggerDefault
    return Layer.merge(Logger.replace(Logger.defaultLogger, redacting(withRequestId(logger))), Logger.minimumLogLevel(level))
  })
)
