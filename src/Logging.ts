/**
 * Structured logs: JSON lines with LOG_FORMAT=json (production), logfmt with LOG_FORMAT=logfmt,
 * readable lines otherwise. Every line logged while a request runs carries its `request_id`
 * (src/Http.ts annotates the request's fiber); the access line is observeRequests'.
 *
 * No code logs a key, a secret or a header. As a last line of defence every message and
 * annotation is also scrubbed of anything shaped like a Hookline credential.
 */
import { Config, ConfigError, Effect, Either, HashMap, Layer, Logger, LogLevel } from "effect"

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
    return Layer.merge(Logger.replace(Logger.defaultLogger, redacting(logger)), Logger.minimumLogLevel(level))
  })
)
