# syntax=docker/dockerfile:1
# Hookline on the official Bun image. Configure it with environment variables only (see README).

FROM oven/bun:1.4.5-debian AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only, from the lockfile (bun reads package-lock.json).
RUN bun install --production --frozen-lockfile

FROM oven/bun:1.4.5-debian AS runtime
# ffmpeg/ffprobe: the default clip scorer analyses uploads with them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
 && rm -rf /var/lib/apt/lists/*
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
