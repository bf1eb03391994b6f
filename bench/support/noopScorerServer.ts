/**
 * The Hookline server exactly as src/main.ts starts it (same configuration from the
 * environment), except that its workers use a scorer that answers at once: the predictions
 * bench runs it to measure the pipeline's own ceiling (API, upload, ledger, queue, workers,
 * outbox) without the media analysis.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { appLayer, ServerLive } from "../../src/App.js"
import { LoggingLive } from "../../src/Logging.js"
import { ClipScorer } from "../../src/Predictions/Scorer.js"

const NoopScorer = Layer.succeed(
  ClipScorer,
  ClipScorer.of({
    score: () => Effect.succeed({ band: "medium", hookDurationSec: 1.5, durationSec: 15, category: null, features: {} })
  })
)

/** The production wiring, the scorer swapped by an ordinary Layer. */
const App = appLayer(ServerLive).pipe(Layer.provide(NoopScorer))

Layer.launch(App).pipe(
  Effect.provide(LoggingLive),
  NodeRuntime.runMain
)
