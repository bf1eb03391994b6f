/**
 * Structured logs: JSON lines with LOG_FORMAT=json (production), logfmt with LOG_FORMAT=logfmt,
 * readable lines otherwise. Every line logged while a request runs carries its `request_id`
 * (added here from the fiber's RequestId); the access line is the request path's.
 *
 * No code logs a key, a secret or a header. As a last line of defence every message and
 * annotation is also scrubbed of anything shaped like a Hookline credential, in every format
 * and in the log events recorded on spans.
 */
import { Cause, Config, Effect, type Fiber, Formatter, Layer, Logger, type LogLevel, References, Schema, SchemaIssue } from "effect"
import { RequestId } from "./Errors.js"

const levels: Record<string, LogLevel.LogLevel> = {
  all: "All",
  trace: "Trace",
  debug: "Debug",
  info: "Info",
  warn: "Warn",
  warning: "Warn",
  error: "Error",
  fatal: "Fatal",
  none: "None"
}

/** A setting that is present but unreadable: the boot fails with this message. */
const invalid = (message: string) =>
  Effect.fail(new Config.ConfigError(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message }))))

/** LOG_LEVEL, case-insensitive: trace, debug, info (default), warning, error, fatal, none. */
export const LogLevelConfig = Config.String("LOG_LEVEL").pipe(
  Config.withDefault("info"),
  Config.mapEffect((name) => {
    const level = levels[name.toLowerCase()]
    return level === undefined ? invalid(`LOG_LEVEL must be one of ${Object.keys(levels).join(", ")}`) : Effect.succeed(level)
  })
)

/** API keys, webhook secrets and bearer credentials, by shape. */
const credentialPattern = /hkl_live_[A-Za-z0-9_-]+|whsec_[A-Za-z0-9+/=]+|(Bearer\s+)[A-Za-z0-9._~+/=-]+/g

export const redactCredentials = (text: string): string =>
  text.replace(credentialPattern, (_match, bearer: string | undefined) => `${bearer ?? ""}[REDACTED]`)

const redactValue = (value: unknown): unknown => (typeof value === "string" ? redactCredentials(value) : value)

type Annotations = Readonly<Record<string, unknown>>

/**
 * The fiber as a logger sees it, with other log annotations. Effect's formatters read the
 * annotations from the fiber (`References.CurrentLogAnnotations`), not from the log options,
 * so a changed copy can only reach them through this view; everything else is the fiber's own.
 */
const withAnnotations = (fiber: Fiber.Fiber<unknown, unknown>, annotations: Annotations): Fiber.Fiber<unknown, unknown> =>
  new Proxy(fiber, {
    get: (target, key) => {
      if (key === "getRef") {
        return (ref: Parameters<typeof target.getRef>[0]) => (ref === References.CurrentLogAnnotations ? annotations : target.getRef(ref))
      }
      const value: unknown = Reflect.get(target, key)
      return typeof value === "function" ? value.bind(target) : value
    }
  })

/** The same logger, with the request id added to every line logged while a request runs. */
export const withRequestId = <Output>(logger: Logger.Logger<unknown, Output>): Logger.Logger<unknown, Output> =>
  Logger.make((options) => {
    const requestId = options.fiber.getRef(RequestId)
    const annotations = options.fiber.getRef(References.CurrentLogAnnotations)
    if (requestId === RequestId.defaultValue() || "request_id" in annotations) return logger.log(options)
    return logger.log({ ...options, fiber: withAnnotations(options.fiber, { ...annotations, request_id: requestId }) })
  })

/** The same logger, with credential-shaped text in messages and annotations replaced. */
export const redacting = <Output>(logger: Logger.Logger<unknown, Output>): Logger.Logger<unknown, Output> =>
  Logger.make((options) => {
    const annotations: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(options.fiber.getRef(References.CurrentLogAnnotations))) annotations[key] = redactValue(value)
    return logger.log({
      ...options,
      message: Array.isArray(options.message) ? options.message.map(redactValue) : redactValue(options.message),
      fiber: withAnnotations(options.fiber, annotations)
    })
  })

/**
 * One JSON object a line: `message`, `logLevel` ("INFO"), `timestamp`, `cause` (when there is
 * one), `annotations`, `spans`, `fiberId`. Formatting only: where the line goes is the caller's.
 */
export const jsonLogger: Logger.Logger<unknown, string> = Logger.map(
  Logger.formatStructured,
  ({ annotations, cause, fiberId, level, message, spans, timestamp }) =>
    Formatter.formatJson({ message, logLevel: level, timestamp, cause, annotations, spans, fiberId })
)

const twoDigits = (n: number) => String(n).padStart(2, "0")

/** A value as the terminal line shows it: plain when it has no space, JSON otherwise. */
const terminalValue = (value: unknown): string =>
  typeof value === "string" && /^[^\s"=]+$/.test(value) ? value : Formatter.formatJson(value)

/**
 * The terminal's format (LOG_FORMAT=pretty): one line an entry, local time, level, message and
 * `key=value` annotations, so the access log takes one line a request and the start-up banner
 * stays on screen; a cause follows on its own lines.
 */
export const terminalLogger: Logger.Logger<unknown, string> = Logger.make(({ cause, date, fiber, logLevel, message }) => {
  const time = `${twoDigits(date.getHours())}:${twoDigits(date.getMinutes())}:${twoDigits(date.getSeconds())}.${
    String(date.getMilliseconds()).padStart(3, "0")
  }`
  const texts = (Array.isArray(message) ? message : [message]).map((part) => (typeof part === "string" ? part : Formatter.formatJson(part)))
  const annotations = Object.entries(fiber.getRef(References.CurrentLogAnnotations)).map(([key, value]) => `${key}=${terminalValue(value)}`)
  const line = [`[${time}]`, logLevel.toUpperCase(), ...texts, ...annotations].join(" ")
  return cause.reasons.length > 0 ? `${line}\n${Cause.pretty(cause)}` : line
})

export const LogFormatConfig = Config.Literals(["json", "pretty", "logfmt"], "LOG_FORMAT").pipe(
  Config.withDefault("pretty" as const)
)

export const LoggingLive = Layer.unwrap(
  Effect.gen(function*() {
    const format = yield* LogFormatConfig
    const level = yield* LogLevelConfig
    // The finished line is scrubbed once more: credentials inside an error or an object too.
    const logger = format === "json"
      ? Logger.withConsoleLog(Logger.map(jsonLogger, redactCredentials))
      : format === "logfmt"
      ? Logger.withConsoleLog(Logger.map(Logger.formatLogFmt, redactCredentials))
      : Logger.withConsoleLog(Logger.map(terminalLogger, redactCredentials))
    return Layer.mergeAll(
      Logger.layer([redacting(withRequestId(logger)), redacting(Logger.tracerLogger)]),
      Layer.succeed(References.MinimumLogLevel, level)
    )
  })
)
