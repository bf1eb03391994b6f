/**
 * A small S3-compatible object store for tests, on loopback: path-style `/<bucket>/<key>` with
 * PUT (plain and presigned), HEAD, GET (with a byte range) and DELETE, objects in memory. It
 * checks that requests are signed (header or presigned query) but not the signatures, and
 * leaves out multipart uploads (Bun's client sends objects under its part size in one PUT).
 */

export interface FakeS3 {
  readonly endpoint: string
  readonly bucket: string
  readonly objects: ReadonlyMap<string, Uint8Array<ArrayBuffer>>
  /** Every request as "METHOD key". */
  readonly log: ReadonlyArray<string>
  readonly stop: () => Promise<void>
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
