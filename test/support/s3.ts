/**
 * A small S3-compatible object store for tests, on loopback: path-style `/<bucket>/<key>` with
 * PUT (plain and presigned), HEAD, GET (with a byte range), DELETE and ListObjectsV2 (prefix,
 * max-keys, continuation token), objects in memory. As real S3 does, a presigned PUT can be
 * repeated until the link expires: each one replaces the object. It checks that requests are
 * signed (header or presigned query) but not the signatures, and leaves out multipart uploads
 * (Bun's client sends objects under its part size in one PUT).
 */

export interface FakeS3 {
  readonly endpoint: string
  readonly bucket: string
  readonly objects: ReadonlyMap<string, Uint8Array<ArrayBuffer>>
  /** Every request as "METHOD key". */
  readonly log: ReadonlyArray<string>
  readonly stop: () => Promise<void>
}

const xmlEscape = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/** ListObjectsV2: keys in order; the continuation token is the last key of the previous page. */
const listObjects = (objects: ReadonlyMap<string, Uint8Array>, bucket: string, params: URLSearchParams) => {
  const prefix = params.get("prefix") ?? ""
  const maxKeys = Math.min(1000, Number(params.get("max-keys") ?? "1000"))
  const after = params.get("continuation-token") ?? params.get("start-after") ?? ""
  const keys = [...objects.keys()].filter((key) => key.startsWith(prefix) && key > after).sort()
  const page = keys.slice(0, maxKeys)
  const truncated = keys.length > page.length
  const contents = page.map((key) =>
    `<Contents><Key>${xmlEscape(key)}</Key><Size>${objects.get(key)?.length ?? 0}</Size><ETag>"1"</ETag>` +
    `<LastModified>${new Date().toISOString()}</LastModified></Contents>`
  ).join("")
  const next = truncated ? `<NextContinuationToken>${xmlEscape(page[page.length - 1])}</NextContinuationToken>` : ""
  return new Response(
    `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>${bucket}</Name><Prefix>${xmlEscape(prefix)}</Prefix>` +
      `<KeyCount>${page.length}</KeyCount><MaxKeys>${maxKeys}</MaxKeys><IsTruncated>${truncated}</IsTruncated>${next}${contents}</ListBucketResult>`,
    { headers: { "content-type": "application/xml" } }
  )
}

export const startFakeS3 = (bucket = "clips"): FakeS3 => {
  const objects = new Map<string, Uint8Array<ArrayBuffer>>()
  const log: Array<string> = []
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      const url = new URL(request.url)
      const prefix = `/${bucket}/`
      if (request.method === "GET" && url.pathname === prefix && url.searchParams.get("list-type") === "2") {
        log.push(`LIST ${url.searchParams.get("prefix") ?? ""}`)
        return listObjects(objects, bucket, url.searchParams)
      }
      if (!url.pathname.startsWith(prefix)) return new Response("<Error><Code>NoSuchBucket</Code></Error>", { status: 404 })
      const key = decodeURIComponent(url.pathname.slice(prefix.length))
      const signed = (request.headers.get("authorization") ?? "").startsWith("AWS4-HMAC-SHA256") ||
        url.searchParams.has("X-Amz-Signature")
      if (!signed) return new Response("<Error><Code>AccessDenied</Code></Error>", { status: 403 })
      log.push(`${request.method} ${key}`)
      const object = objects.get(key)
      switch (request.method) {
        case "PUT":
          objects.set(key, new Uint8Array(await request.arrayBuffer()))
          return new Response(null, { status: 200, headers: { etag: `"${objects.size}"` } })
        case "HEAD":
          return object === undefined
            ? new Response(null, { status: 404 })
            : new Response(null, {
              status: 200,
              headers: { "content-length": String(object.length), etag: "\"1\"", "last-modified": new Date().toUTCString() }
            })
        case "GET": {
          if (object === undefined) return new Response("<Error><Code>NoSuchKey</Code></Error>", { status: 404 })
          const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.get("range") ?? "")
          if (range === null) return new Response(object)
          const end = range[2] === "" ? object.length : Math.min(object.length, Number(range[2]) + 1)
          return new Response(object.subarray(Number(range[1]), end), { status: 206 })
        }
        case "DELETE":
          objects.delete(key)
          return new Response(null, { status: 204 })
        default:
          return new Response("<Error><Code>NotImplemented</Code></Error>", { status: 501 })
      }
    }
  })
  return {
    endpoint: `http://127.0.0.1:${server.port}`,
    bucket,
    objects,
    log,
    stop: () => server.stop(true)
  }
}
