/**
 * Which URLs a webhook may point at (docs/security.md, "Webhooks and SSRF"): absolute https (http only when
 * WEBHOOK_ALLOW_INSECURE), at most 2,048 characters, no user info, no fragment, and a host
 * that is, and resolves only to, public addresses (unless WEBHOOK_ALLOW_PRIVATE).
 *
 * The check runs when the URL is set and again before every attempt, because DNS can change.
 * The attempt then connects to the very address that was checked (see Transport.ts), so a name
 * that re-resolves between the check and the connection (DNS rebinding) cannot redirect it.
 */
import { Data, Duration, Effect, Result } from "effect"
import { lookup } from "node:dns/promises"
import { isIP } from "node:net"

export class UrlRefused extends Data.TaggedError("UrlRefused")<{
  readonly message: string
  /** The host name did not resolve (or not in time): a state of DNS, not a broken rule. */
  readonly unresolved?: boolean
}> {}

export const maxUrlLength = 2_048

export interface UrlRules {
  readonly allowInsecure: boolean
  readonly allowPrivate: boolean
}

/** The URL's form alone: scheme, length, user info, fragment. */
export const checkUrlShape = (raw: string, rules: Pick<UrlRules, "allowInsecure">): Result.Result<URL, UrlRefused> => {
  const refuse = (message: string) => Result.fail(new UrlRefused({ message }))
  if (raw.length > maxUrlLength) return refuse(`must be at most ${maxUrlLength} characters`)
  if (/[\s\u0000-\u001f\u007f]/.test(raw)) return refuse("must not contain whitespace or control characters")
  if (!URL.canParse(raw)) return refuse("must be an absolute URL such as https://example.com/hooks")
  const url = new URL(raw)
  if (url.protocol === "http:" && !rules.allowInsecure) {
    return refuse("must use https (a server run for local development allows http:// with WEBHOOK_ALLOW_INSECURE=true)")
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return refuse("must be an absolute https URL")
  // The authority as written: user info may be empty ("https://@host") and still be present.
  const authority = raw.slice(raw.indexOf("//") + 2).split(/[/?#]/, 1)[0]
  if (authority.includes("@") || url.username !== "" || url.password !== "") return refuse("must not contain user info")
  if (raw.includes("#")) return refuse("must not contain a fragment")
  if (url.hostname === "") return refuse("must name a host")
  return Result.succeed(url)
}

// ---------------------------------------------------------------------------------------------
// Addresses

const parseIpv4 = (text: string): bigint | null => {
  const parts = text.split(".")
  if (parts.length !== 4) return null
  let value = 0n
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part)) return null
    const octet = Number(part)
    if (octet > 255) return null
    value = (value << 8n) | BigInt(octet)
  }
  return value
}

const parseIpv6 = (text: string): bigint | null => {
  let rest = text.replace(/%.*$/, "") // zone id
  if (rest.includes(".")) {
    // An embedded IPv4 tail (::ffff:10.0.0.1) becomes two hex groups.
    const lastColon = rest.lastIndexOf(":")
    const v4 = parseIpv4(rest.slice(lastColon + 1))
    if (v4 === null) return null
    rest = `${rest.slice(0, lastColon + 1)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`
  }
  const halves = rest.split("::")
  if (halves.length > 2) return null
  const split = (half: string) => (half === "" ? [] : half.split(":"))
  const head = split(halves[0])
  const tail = halves.length === 2 ? split(halves[1]) : []
  const missing = 8 - head.length - tail.length
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null
  const groups = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail]
  let value = 0n
  for (const group of groups) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(group)) return null
    value = (value << 16n) | BigInt(parseInt(group, 16))
  }
  return value
}

interface Block {
  readonly base: bigint
  readonly bits: number
  readonly label: string
}

const block = (cidr: string, label: string, family: 4 | 6): Block => {
  const [address, bits] = cidr.split("/")
  const base = family === 4 ? parseIpv4(address) : parseIpv6(address)
  if (base === null) throw new Error(`bad range ${cidr}`)
  return { base, bits: Number(bits), label }
}

const within = (value: bigint, range: Block, width: number): boolean => {
  const shift = BigInt(width - range.bits)
  return value >> shift === range.base >> shift
}

/** IPv4 ranges that are not the public internet (IANA special-purpose registry). */
const ipv4Blocks: ReadonlyArray<Block> = [
  block("0.0.0.0/8", "unspecified", 4),
  block("10.0.0.0/8", "private", 4),
  block("100.64.0.0/10", "private", 4), // shared address space (carrier-grade NAT)
  block("127.0.0.0/8", "loopback", 4),
  block("169.254.0.0/16", "link-local", 4), // includes cloud metadata at 169.254.169.254
  block("172.16.0.0/12", "private", 4),
  block("192.0.0.0/24", "reserved", 4),
  block("192.0.2.0/24", "reserved", 4),
  block("192.88.99.0/24", "reserved", 4),
  block("192.168.0.0/16", "private", 4),
  block("198.18.0.0/15", "reserved", 4),
  block("198.51.100.0/24", "reserved", 4),
  block("203.0.113.0/24", "reserved", 4),
  block("224.0.0.0/4", "multicast", 4),
  block("240.0.0.0/4", "reserved", 4) // includes 255.255.255.255
]

const classifyIpv4 = (value: bigint): string | null =>
  ipv4Blocks.find((range) => within(value, range, 32))?.label ?? null

/** IPv6 prefixes whose last (or embedded) 32 bits are an IPv4 address, judged as that address. */
const mapped = block("::ffff:0:0/96", "mapped", 6)
const nat64 = block("64:ff9b::/96", "nat64", 6)
const sixToFour = block("2002::/16", "6to4", 6)
const globalUnicast = block("2000::/3", "global", 6)

const ipv6Blocks: ReadonlyArray<Block> = [
  block("::/128", "unspecified", 6),
  block("::1/128", "loopback", 6),
  block("fe80::/10", "link-local", 6),
  block("fec0::/10", "private", 6), // site-local (deprecated)
  block("fc00::/7", "private", 6), // unique local
  block("ff00::/8", "multicast", 6),
  block("64:ff9b:1::/48", "private", 6), // local-use NAT64
  block("2001::/23", "reserved", 6), // IETF protocol assignments, Teredo
  block("2001:db8::/32", "reserved", 6),
  block("3fff::/20", "reserved", 6)
]

const classifyIpv6 = (value: bigint): string | null => {
  if (within(value, mapped, 128) || within(value, nat64, 128)) return classifyIpv4(value & 0xffffffffn)
  if (within(value, sixToFour, 128)) return classifyIpv4((value >> 80n) & 0xffffffffn)
  const listed = ipv6Blocks.find((range) => within(value, range, 128))
  if (listed !== undefined) return listed.label
  // Outside 2000::/3 nothing is assigned for public unicast.
  return within(value, globalUnicast, 128) ? null : "reserved"
}

/**
 * Why an address may not be a webhook target ("loopback", "private", "link-local",
 * "multicast", "reserved", "unspecified"), or null for a public address. IPv4-mapped,
 * NAT64 and 6to4 IPv6 addresses are judged by the IPv4 address inside them.
 */
export const refusedRange = (address: string): string | null => {
  const bare = address.replace(/^\[|\]$/g, "")
  const family = isIP(bare.replace(/%.*$/, ""))
  if (family === 4) {
    const value = parseIpv4(bare)
    return value === null ? "reserved" : classifyIpv4(value)
  }
  if (family === 6) {
    const value = parseIpv6(bare)
    return value === null ? "reserved" : classifyIpv6(value)
  }
  return "reserved"
}

// ---------------------------------------------------------------------------------------------
// Resolution

export interface Address {
  readonly address: string
  readonly family: 4 | 6
}

/** A checked URL and the addresses an attempt may connect to, in the resolver's order. */
export interface Target {
  readonly url: URL
  readonly addresses: ReadonlyArray<Address>
  /** True when the URL's host is an IP literal (no name to verify a certificate against). */
  readonly literal: boolean
}

const resolveAll = (host: string, timeout: Duration.Duration) =>
  Effect.tryPromise({
    try: () => lookup(host, { all: true, verbatim: true }),
    catch: () => new UrlRefused({ message: `the host ${host} does not resolve`, unresolved: true })
  }).pipe(
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () => Effect.fail(new UrlRefused({ message: `the host ${host} did not resolve in time`, unresolved: true }))
    }),
    Effect.filterOrFail(
      (addresses) => addresses.length > 0,
      () => new UrlRefused({ message: `the host ${host} does not resolve`, unresolved: true })
    )
  )

/**
 * Checks a URL completely: its shape, then every address its host has (all must be allowed).
 * Fails with a message that names the rule broken.
 */
export const resolveTarget = (
  raw: string,
  rules: UrlRules,
  resolveTimeout: Duration.Duration
): Effect.Effect<Target, UrlRefused> =>
  Effect.gen(function*() {
    const url = yield* Effect.fromResult(checkUrlShape(raw, rules))
    const host = url.hostname.replace(/^\[|\]$/g, "")
    const literalFamily = isIP(host)
    const addresses: ReadonlyArray<{ readonly address: string; readonly family: number }> = literalFamily !== 0
      ? [{ address: host, family: literalFamily }]
      : yield* resolveAll(host, resolveTimeout)
    if (!rules.allowPrivate) {
      for (const { address } of addresses) {
        const range = refusedRange(address)
        if (range !== null) {
          const rule = "webhooks must reach a public address " +
            "(a server run for local development allows others with WEBHOOK_ALLOW_PRIVATE=true)"
          return yield* new UrlRefused({
            message: literalFamily !== 0
              ? `${address} is a ${range} address; ${rule}`
              : `the host ${host} resolves to ${address}, a ${range} address; ${rule}`
          })
        }
      }
    }
    return {
      url,
      addresses: addresses.map(({ address, family }): Address => ({ address, family: family === 6 ? 6 : 4 })),
      literal: literalFamily !== 0
    } satisfies Target
  })
