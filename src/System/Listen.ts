/** The server's listeners: which one a request came in on, and why one could not take its port. */
import { Context, Data } from "effect"

/**
 * The listener a request came in on: the API port, or the metrics port (METRICS_PORT), which
 * serves the same app but only the routes annotated `OnMetricsListener` (src/RouteTraits.ts).
 */
export type ListenerRole = "api" | "metrics"

export const ListenerRole = Context.Reference<ListenerRole>("hookline/ListenerRole", { defaultValue: () => "api" })

/** Bun could not listen: the message names the port, and PORT when another process holds it. */
export class ServerStartFailed extends Data.TaggedError("ServerStartFailed")<{ readonly port: number; readonly cause: unknown }> {
  override get message() {
    if ((this.cause as { code?: unknown } | null)?.code === "EADDRINUSE") {
      return `Port ${this.port} is in use (another Hookline or another program listens on it): stop that process, or choose another port with PORT, e.g. PORT=${this.port + 1} npm start`
    }
    return `Could not listen on port ${this.port}: ${this.cause instanceof Error ? this.cause.message : String(this.cause)}`
  }
}
