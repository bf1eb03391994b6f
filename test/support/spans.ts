/** A tracer for tests that keeps every span Effect's own tracer makes. */
import { Effect, Tracer } from "effect"

export const collectSpans = () => {
  const spans: Array<Tracer.Span> = []
  const native = Effect.runSync(Effect.tracer)
  const tracer = Tracer.make({
    span(name, parent, context, links, startTime, kind, options) {
      const span = native.span(name, parent, context, links, startTime, kind, options)
      spans.push(span)
      return span
    },
    context: (f, fiber) => native.context(f, fiber)
  })
  return { spans, tracer }
}
