/** A tracer for tests that keeps every span Effect's own tracer makes. */
import { Tracer } from "effect"

export const collectSpans = () => {
  const spans: Array<Tracer.Span> = []
  const native = Tracer.nativeTracer
  const tracer = Tracer.make({
    span(options) {
      const span = native.span(options)
      spans.push(span)
      return span
    },
    context: native.context
  })
  return { spans, tracer }
}
