# syntax=docker/dockerfile:1
# Hookline on the official Bun image. Configure it with environment variables only (see README).

FROM oven/bun:1.4.5-debian AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# A build behind a TLS-inspecting proxy passes that proxy's CA bundle, mounted into the build:
# --build-arg NODE_EXTRA_CA_CERTS=<its path in the build> (scripts/image-check.sh does).
ARG NODE_EXTRA_CA_CERTS
# Production dependencies only, from the lockfile (bun reads package-lock.json). Then what never
# runs goes: the npm ffmpeg and ffprobe builds (development fallbacks, 140 MB; the image has
# Debian's, which are found first), type declarations, source maps and Effect's TypeScript sources.
RUN bun install --production --frozen-lockfile \
 && rm -rf node_modules/@ffmpeg-installer node_modules/@ffprobe-installer node_modules/@types \
      node_modules/effect/src node_modules/@effect/*/src \
 && find node_modules -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \) -delete

FROM oven/bun:1.4.5-debian AS runtime
# ffmpeg/ffprobe: the default clip scorer analyses uploads with them. Debian's ffmpeg pulls in
# Mesa's OpenGL drivers with LLVM (165 MB) through SDL, which only loads them to open a display:
# they go, and the build fails if ffmpeg or ffprobe then misses a library. (A derived image that
# installs packages with apt-get gets them back with `apt-get install -f`.)
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
 && dpkg --purge --force-depends libgl1-mesa-dri libllvm15 libz3-4 \
 && ! ldd /usr/bin/ffmpeg /usr/bin/ffprobe | grep 'not found' \
 && ffmpeg -hide_banner -version >/dev/null && ffprobe -hide_banner -version >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
WORKDIR /app
# MIMALLOC_PURGE_DELAY=-1: freed memory stays with the process (README, "Configuration").
ENV NODE_ENV=production \
    MIMALLOC_PURGE_DELAY=-1 \
    PORT=8080 \
    DATA_DIR=/data \
    LOG_FORMAT=json
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY src ./src
COPY migrations ./migrations
RUN mkdir -p /data && chown -R bun:bun /data
USER bun
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD bun -e "fetch('http://127.0.0.1:' + (process.env.PORT ?? '8080') + '/healthz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"
# Exec form, no shell and no npm in between: bun is PID 1 and gets docker stop's SIGTERM itself
# (its runtime installs the handler PID 1 needs), drains and exits. Give `docker stop` more than
# SHUTDOWN_GRACE_PERIOD (10 s) before it sends SIGKILL: `docker stop -t 20` or --stop-timeout 20.
STOPSIGNAL SIGTERM
CMD ["bun", "src/main.ts"]
