/**
 * Running the scorer's media tools (ffprobe, ffmpeg) with bounded cost: output is read as it
 * streams and capped, stderr keeps only its end, and every run has a timeout.
 */
import { Data, Duration, Effect, Option } from "effect"

export interface ProcessResult {
  readonly exitCode: number
  readonly stdout: string
  readonly stderr: string
}

export class ProcessTimeout extends Data.TaggedError("ProcessTimeout")<{}> {}

export class OutputTooLarge extends Data.TaggedError("OutputTooLarge")<{}> {}

/** stderr is only read for its end (ebur128's summary, the last error): this much of it is kept. */
const stderrTailChars = 64 * 1024

/**
 * Reads a stream of text as it arrives, never holding more than `limit` bytes: past it,
 * `onOverflow` runs (the process is killed) and the result is null. With `tail`, the text is
 * cut to its last `limit` characters instead, and never overflows.
 */
const readCapped = async (stream: ReadableStream<Uint8Array>, limit: number, onOverflow: () => void, tail = false) => {
  const decoder = new TextDecoder()
  let text = ""
  let bytes = 0
  const reader = stream.getReader()
  while (true) {
    const { done, value: chunk } = await reader.read()
    if (done) break
    bytes += chunk.length
    if (!tail && bytes > limit) {
      onOverflow()
      await reader.cancel()
      return null
    }
    text += decoder.decode(chunk, { stream: true })
    if (tail && text.length > limit) text = text.slice(-limit)
  }
  return text + decoder.decode()
}

/**
 * Runs a program to completion, reading its output as it streams (stdout up to `maxOutputBytes`,
 * else OutputTooLarge; the end of stderr); killed when interrupted, past the output cap, or
 * after `timeout`.
 */
export const runProcess = (command: ReadonlyArray<string>, timeout: Duration.Duration, maxOutputBytes: number) =>
  Effect.acquireUseRelease(
    Effect.sync(() => Bun.spawn([...command], { stdin: "ignore", stdout: "pipe", stderr: "pipe" })),
    (child) =>
      Effect.promise(() => {
        const kill = () => child.kill("SIGKILL")
        return Promise.all([
          readCapped(child.stdout, maxOutputBytes, kill),
          readCapped(child.stderr, stderrTailChars, kill, true),
          child.exited
        ])
      }).pipe(
        Effect.flatMap(([stdout, stderr, exitCode]) =>
          stdout === null || stderr === null
            ? Effect.fail(new OutputTooLarge())
            : Effect.succeed<ProcessResult>({ exitCode, stdout, stderr })
        ),
        Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.fail(new ProcessTimeout()) })
      ),
    (child) => Effect.sync(() => {
      if (child.exitCode === null) child.kill("SIGKILL")
    })
  )

/** Whether a tool is the npm installer packages' build (a 2018 static ffmpeg, for development). */
export const isBundledTool = (path: string) => /@ff(mpeg|probe)-installer/.test(path)

/** FFMPEG_PATH / FFPROBE_PATH, then the system's, then the npm installer packages (development fallback). */
export const locateTool = (configured: Option.Option<string>, name: "ffmpeg" | "ffprobe") =>
  Effect.promise(async (): Promise<string | null> => {
    if (Option.isSome(configured)) return configured.value
    const system = Bun.which(name)
    if (system !== null) return system
    try {
      const installer = name === "ffmpeg"
        ? await import("@ffmpeg-installer/ffmpeg")
        : await import("@ffprobe-installer/ffprobe")
      return installer.path
    } catch {
      return null
    }
  })
