/**
 * Which URLs a webhook may point at (docs/security.md, "Webhooks and SSRF"): absolute https (http only when
 * WEBHOOK_ALLOW_INSECURE), at most 2,048 characters, no user info, no fragment, and a host
 * that is, and resolves only to, public addresses (unless WEBHOOK_ALLOW_PRIVATE).
 *
 * The check runs when the URL is set and again before every attempt, because DNS can change.
 * The attempt then connects to the very address that was checked (see Transport.ts), so a name
 * that re-resolves between the check and the connection (DNS rebinding) cannot redirect it.
 */
import { Data, Duration, Effect, Option, Result } from "effect"
import { IpNetwork, NetAddress } from "effect/net"
import { lookup } from "node:dns/promises"

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

interface Block {
  readonly network: IpNetwork.IpNetwork
  readonly label: string
}

const block = (cidr: string, label: string): Block => ({ network: IpNetwork.fromStringUnsafe(cidr), label })

/** IPv4 ranges that are not the public internet (IANA special-purpose registry). */
const ipv4Blocks: ReadonlyArray<Block> = [
  block("0.0.0.0/8", "unspecified"),
  block("10.0.0.0/8", "private"),
  block("100.64.0.0/10", "private"), // shared address space (carrier-grade NAT)
  block("127.0.0.0/8", "loopback"),
  block("169.254.0.0/16", "link-local"), // includes cloud metadata at 169.254.169.254
  block("172.16.0.0/12", "private"),
  block("192.0.0.0/24", "reserved"),
  block("192.0.2.0/24", "reserved"),
  block("192.88.99.0/24", "reserved"),
  block("192.168.0.0/16", "private"),
  block("198.18.0.0/15", "reserved"),
  block("198.51.100.0/24", "reserved"),
  block("203.0.113.0/24", "reserved"),
  block("224.0.0.0/4", "multicast"),
  block("240.0.0.0/4", "reserved") // includes 255.255.255.255
]

/** IPv6 prefixes that carry an IPv4 address, judged as that address: NAT64 in its last 32 bits, 6to4 in bits 16-47. */
const nat64 = IpNetwork.fromStringUnsafe("64:ff9b::/96")
const sixToFour = IpNetwork.fromStringUnsafe("2002::/16")
const globalUnicast = IpNetwork.fromStringUnsafe("2000::/3")

const ipv6Blocks: ReadonlyArray<Block> = [
  block("::/128", "unspecified"),
  block("::1/128", "loopback"),
  block("fe80::/10", "link-local"),
  block("fec0::/10", "private"), // site-local (deprecated)
  block("fc00::/7", "private"), // unique local
  block("ff00::/8", "multicast"),
  block("64:ff9b:1::/48", "private"), // local-use NAT64
  block("2001::/23", "reserved"), // IETF protocol assignments, Teredo
  block("2001:db8::/32", "reserved"),
  block("3fff::/20", "reserved")
]

const listedIn = (blocks: ReadonlyArray<Block>, address: NetAddress.IpAddress): string | null =>
  blocks.find((range) => IpNetwork.contains(range.network, address))?.label ?? null

/** The IPv4 address in four of an IPv6 address's sixteen bytes, from `at`. */
const ipv4At = (address: NetAddress.Ipv6Address, at: number): NetAddress.Ipv4Address =>
  NetAddress.ipv4FromBytesUnsafe(Uint8Array.from(NetAddress.ipv6ToOctets(address).slice(at, at + 4)))

const classifyIpv6 = (address: NetAddress.Ipv6Address): string | null => {
  const mapped = NetAddress.fromIpv4Mapped(address)
  if (Option.isSome(mapped)) return listedIn(ipv4Blocks, mapped.value)
  if (IpNetwork.contains(nat64, address)) return listedIn(ipv4Blocks, ipv4At(address, 12))
  if (IpNetwork.contains(sixToFour, address)) return listedIn(ipv4Blocks, ipv4At(address, 2))
  // Outside 2000::/3 nothing is assigned for public unicast.
  return listedIn(ipv6Blocks, address) ?? (IpNetwork.contains(globalUnicast, address) ? null : "reserved")
}

/**
 * Why an address may not be a webhook target ("loopback", "private", "link-local",
 * "multicast", "reserved", "unspecified"), or null for a public address. IPv4-mapped,
 * NAT64 and 6to4 IPv6 addresses are judged by the IPv4 address inside them; what does not
 * parse as an address (a zone id is dropped first) is "reserved".
 */
export const refusedRange = (address: string): string | null =>
  Result.match(NetAddress.ipFromString(address.replace(/^\[|\]$/g, "").replace(/%.*$/, "")), {
    onFailure: () => "reserved",
    onSuccess: (parsed) => NetAddress.isIpv4Address(parsed) ? listedIn(ipv4Blocks, parsed) : classifyIpv6(parsed)
  })

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
    const literal = Result.getOrUndefined(NetAddress.ipFromString(host))
    const literalFamily = literal === undefined ? 0 : NetAddress.familyOf(literal) === "IPv4" ? 4 : 6
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
