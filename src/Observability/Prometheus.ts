/**
 * The Prometheus text exposition format (0.0.4): metric pairs rendered one family per name,
 * sorted, with HELP and TYPE lines. What is measured is Metrics.ts's.
 */
import { MetricKeyType, MetricState, Option } from "effect"
import type { MetricPair } from "effect"

/** The content type of the Prometheus text exposition format. */
export const prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')
const escapeHelp = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")
const metricName = (name: string) => name.replace(/[^a-zA-Z0-9_:]/g, "_").replace(/^([0-9])/, "_$1")
const formatNumber = (value: number | bigint) =>
  typeof value === "bigint"
    ? value.toString()
    : Number.isNaN(value)
    ? "NaN"
    : value === Infinity
    ? "+Inf"
    : value === -Infinity
    ? "-Inf"
    : String(value)

const labelSet = (pairs: ReadonlyArray<readonly [string, string]>) =>
  pairs.length === 0 ? "" : `{${pairs.map(([key, value]) => `${metricName(key)}="${escapeLabel(value)}"`).join(",")}}`

/** Renders metric pairs in the Prometheus text format, one family per name, sorted. */
export const renderPrometheus = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, { type: string; help: string; lines: Array<string> }>()
  const sorted = [...pairs].sort((a, b) => a.metricKey.name.localeCompare(b.metricKey.name))
  for (const { metricKey, metricState } of sorted) {
    const name = metricName(metricKey.name)
    const tags = metricKey.tags.map((label) => [label.key, label.value] as const)
    const help = Option.getOrElse(metricKey.description, () => name)
    const family = (type: string) => {
      let found = families.get(name)
      if (found === undefined) {
        found = { type, help, lines: [] }
        families.set(name, found)
      }
      return found.lines
    }
    if (MetricKeyType.isCounterKey(metricKey.keyType) && MetricState.isCounterState(metricState)) {
      family("counter").push(`${name}${labelSet(tags)} ${formatNumber(metricState.count)}`)
    } else if (MetricKeyType.isGaugeKey(metricKey.keyType) && MetricState.isGaugeState(metricState)) {
      family("gauge").push(`${name}${labelSet(tags)} ${formatNumber(metricState.value)}`)
    } else if (MetricKeyType.isHistogramKey(metricKey.keyType) && MetricState.isHistogramState(metricState)) {
      const lines = family("histogram")
      let sawInfinity = false
      for (const [boundary, cumulative] of metricState.buckets) {
        if (boundary === Infinity) sawInfinity = true
        lines.push(`${name}_bucket${labelSet([...tags, ["le", formatNumber(boundary)]])} ${cumulative}`)
      }
      if (!sawInfinity) lines.push(`${name}_bucket${labelSet([...tags, ["le", "+Inf"]])} ${metricState.count}`)
      lines.push(`${name}_sum${labelSet(tags)} ${formatNumber(metricState.sum)}`)
      lines.push(`${name}_count${labelSet(tags)} ${metricState.count}`)
    } else if (MetricKeyType.isSummaryKey(metricKey.keyType) && MetricState.isSummaryState(metricState)) {
      const lines = family("summary")
      for (const [quantile, value] of metricState.quantiles) {
        if (Option.isSome(value)) {
          lines.push(`${name}${labelSet([...tags, ["quantile", String(quantile)]])} ${formatNumber(value.value)}`)
        }
      }
      lines.push(`${name}_sum${labelSet(tags)} ${formatNumber(metricState.sum)}`)
      lines.push(`${name}_count${labelSet(tags)} ${metricState.count}`)
    } else if (MetricKeyType.isFrequencyKey(metricKey.keyType) && MetricState.isFrequencyState(metricState)) {
      const lines = family("counter")
      for (const [word, count] of metricState.occurrences) {
        lines.push(`${name}${labelSet([...tags, ["key", word]])} ${count}`)
      }
    }
  }
  let text = ""
  for (const [name, family] of families) {
    text += `# HELP ${name} ${escapeHelp(family.help)}\n# TYPE ${name} ${family.type}\n${family.lines.join("\n")}\n`
  }
  return text
}
