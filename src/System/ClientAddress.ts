/**
 * Whose request this is: the client address every per-address limit counts and the access log
 * writes. It is the connection's peer, unless the peer is a proxy Hookline was told to trust
 * (TRUST_PROXY): then it is the right-most address of the forwarding header (X-Forwarded-For,
 * or Forwarded with TRUST_PROXY_HEADER=forwarded) that is not a trusted proxy.
 *
 * TRUST_PROXY is either a list of proxy addresses and CIDRs (`10.0.0.0/8, 192.0.2.7, fd00::/8`),
 * or a hop count (`1`: the peer is a proxy and the address it appended is the client's; `2`: two
 * proxies in a row, and so on). Unset, the forwarding headers are never read, so no client can
 * claim another's address. Only one header is read: a proxy that appends to X-Forwarded-For
 * passes a client's own `Forwarded` header through untouched (and the other way round), so
 * reading both would let the client choose its address.
 *
 * An entry that is not an IP address (`unknown`, an obfuscated `_name`, garbage) stops the
 * walk and is reported as `unknown`, like a peer Bun could not name.
 */
import { Config, Effect, Schema, SchemaIssue } from "effect"
import { BlockList, isIP } from "node:net"

type Trust =
  | { readonly kind: "nobody" }
  | { readonly kind: "hops"; readonly hops: number }
  | { readonly kind: "list"; readonly proxies: BlockList }

const invalid = (message: string) =>
  Effect.fail(new Config.ConfigError(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message }))))

/** An address as the limits count it: IPv4-mapped IPv6 as plain IPv4; anything else that is not an IP, "unknown". */
export const normalizeAddress = (text: string): string => {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(text)
  const address = mapped !== null ? mapped[1]! : text
  return isIP(address) === 0 ? "unknown" : address.toLowerCase()
}

/** Adds `entry` (an address or a CIDR) to `list`; false when it is neither. */
const addEntry = (list: BlockList, entry: string): boolean => {
  const [address = "", prefix, extra] = entry.split("/")
  const family = isIP(address)
  if (family === 0 || extra !== undefined) return false
  const type = family === 4 ? "ipv4" : "ipv6"
  if (prefix === undefined) {
    list.addAddress(address, type)
    return true
  }
  const bits = /^\d{1,3}$/.test(prefix) ? Number(prefix) : -1
  if (bits < 0 || bits > (family === 4 ? 32 : 128)) return false
  list.addSubnet(address, bits, type)
  return true
}

const trustConfig = Config.String("TRUST_PROXY").pipe(
  Config.withDefault(""),
  Config.mapEffect((text): Effect.Effect<Trust, Config.ConfigError> => {
    const value = text.trim()
    if (value === "" || value === "0" || value.toLowerCase() === "false") return Effect.succeed({ kind: "nobody" })
    if (/^\d+$/.test(value)) return Effect.succeed({ kind: "hops", hops: Number(value) })
    const proxies = new BlockList()
    const refused = value.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "" && !addEntry(proxies, entry))
    return refused.length > 0
      ? invalid(`TRUST_PROXY must be a hop count or a comma-separated list of addresses and CIDRs; not an address: ${refused.join(", ")}`)
      : Effect.succeed({ kind: "list", proxies })
  })
)

export const ClientAddressConfig = Config.all({
  trust: trustConfig,
  header: Config.Literals(["x-forwarded-for", "forwarded"], "TRUST_PROXY_HEADER").pipe(Config.withDefault("x-forwarded-for"))
})

/** One hop's address as a forwarding header writes it: bare, `[v6]:port`, `v4:port`, or quoted (Forwarded). */
const hopAddress = (token: string): string => {
  const text = token.trim().replace(/^"(.*)"$/, "$1")
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(text)
  if (bracketed !== null) return normalizeAddress(bracketed[1]!)
  const withPort = /^(\d{1,3}(?:\.\d{1,3}){3}):\d+$/.exec(text)
  return normalizeAddress(withPort !== null ? withPort[1]! : text)
}

/** The hops a header names, left (farthest) to right (nearest). */
const forwardedHops = (header: "x-forwarded-for" | "forwarded", value: string): Array<string> =>
  header === "x-forwarded-for"
    ? value.split(",").map(hopAddress)
    : value.split(",").map((element) => {
      const pair = element.split(";").map((part) => part.trim()).find((part) => part.toLowerCase().startsWith("for="))
      return pair === undefined ? "unknown" : hopAddress(pair.slice(4))
    })

/**
 * The resolver the request pipeline applies to every request: the peer Bun saw and the request's
 * headers in, the client address out.
 */
export const makeClientAddress = (config: Config.Success<typeof ClientAddressConfig>) => {
  const { header, trust } = config
  const trusted = (address: string) =>
    trust.kind === "list" && address !== "unknown" && trust.proxies.check(address, isIP(address) === 4 ? "ipv4" : "ipv6")
  return (peerAddress: string, headers: Readonly<Record<string, string | undefined>>): string => {
    const peer = normalizeAddress(peerAddress)
    if (trust.kind === "nobody" || (trust.kind === "list" && !trusted(peer))) return peer
    const value = headers[header]
    if (value === undefined || value.trim() === "") return peer
    const chain = [...forwardedHops(header, value), peer]
    if (trust.kind === "hops") return chain[Math.max(0, chain.length - 1 - trust.hops)]!
    let index = chain.length - 1
    while (index > 0 && trusted(chain[index]!)) index--
    return chain[index]!
  }
}
