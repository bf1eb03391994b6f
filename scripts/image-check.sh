#!/usr/bin/env bash
# npm run image:check: builds the Dockerfile with podman and runs the image as a user would.
#
# Only Debian's packages and the npm registry are reachable here, so the Dockerfile's base,
# oven/bun:1.4.5-debian, is stood in for locally: a Debian bookworm made with debootstrap and
# `podman import`, with bun 1.4.5 from the npm package @oven/bun-linux-x64 (scripts/image/).
# Then: build the Dockerfile, start the image with the embedded database, wait for /readyz, call
# /v1/wallet with the banner's demo key, check that bun is PID 1 as uid 1000, stop it with
# `podman stop -t 20` (exit 0, "Hookline stopped" last), print the image's size.
# The base, the stand-in and podman's layer cache stay between runs; containers do not.
# Exits non-zero with a message on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

BUN_VERSION=1.4.5
BUN_IMAGE="docker.io/oven/bun:${BUN_VERSION}-debian"
BASE_IMAGE=localhost/hookline-base:bookworm
IMAGE=${IMAGE_CHECK_TAG:-localhost/hookline:check}
CACHE_DIR=${IMAGE_CHECK_CACHE:-/var/tmp/hookline-image-check}
READY_TIMEOUT=${IMAGE_CHECK_READY_TIMEOUT:-90}
HOST_CA=${IMAGE_CHECK_CA_FILE:-/etc/ssl/certs/ca-certificates.crt}
CONTAINER="hookline-check-$$"
started=$SECONDS

fail() { echo "image:check FAILED: $*" >&2; exit 1; }
step() { echo "image:check: $* ($((SECONDS - started)) s)"; }

# --- Tools, from Debian's packages when missing (as .ci/run installs its other needs).
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || fail "needs ${missing[*]} (apt-get install ${missing[*]}, as root)"
  step "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]}"
fi

# runc, not crun (which refuses hybrid cgroups), and limits the sandbox can grant (podman's
# default asks for more open files and processes than a container here may raise to).
mkdir -p "$CACHE_DIR"
cat >"$CACHE_DIR/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$CACHE_DIR/containers.conf"

cleanup() {
  podman rm -f -t 0 "$CONTAINER" >/dev/null 2>&1 || true
  [ -z "${work:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
work=$(mktemp -d)

# --- The base: Debian bookworm, minbase, slimmed as bookworm-slim is (no docs, man pages, locales).
if ! podman image exists "$BASE_IMAGE"; then
  step "debootstrap bookworm"
  rootfs="$work/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap bookworm"; }
  cat >"$rootfs/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  rm -rf "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  find "$rootfs/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null 2>"$work/import.log" \
    || { cat "$work/import.log" >&2; fail "podman import of the base"; }
  rm -rf "$rootfs"
fi

# --- The stand-in for oven/bun, unless the real image is there (it has no stand-in label).
if podman image exists "$BUN_IMAGE" \
  && [ "$(podman image inspect -f '{{index .Labels "org.hookline.stand-in"}}' "$BUN_IMAGE")" != "true" ]; then
  step "using $BUN_IMAGE as found"
else
  bun_binary=""
  for candidate in node_modules/@oven/bun-linux-x64/bin/bun node_modules/bun/bin/bun.exe; do
    [ -x "$candidate" ] && bun_binary=$candidate && break
  done
  [ -n "$bun_binary" ] || fail "no bun binary in node_modules (run npm ci)"
  [ "$("$bun_binary" --version)" = "$BUN_VERSION" ] || fail "$bun_binary is not bun $BUN_VERSION"
  step "stand-in for $BUN_IMAGE"
  mkdir -p "$work/bun"
  cp scripts/image/bun.Containerfile scripts/image/docker-entrypoint.sh "$work/bun/"
  ln "$bun_binary" "$work/bun/bun" 2>/dev/null || cp "$bun_binary" "$work/bun/bun"
  podman build --pull=never --quiet --label org.hookline.stand-in=true --build-arg "BASE=$BASE_IMAGE" \
    -f "$work/bun/bun.Containerfile" -t "$BUN_IMAGE" "$work/bun" >/dev/null || fail "building the bun stand-in"
fi

# --- The project's Dockerfile, as is; the host's CA bundle mounted for `bun install`.
ca_args=()
if [ -f "$HOST_CA" ]; then
  ca_args=(--volume "$HOST_CA:/run/host-ca.crt:ro" --build-arg NODE_EXTRA_CA_CERTS=/run/host-ca.crt)
fi
step "podman build -t $IMAGE ."
build_started=$SECONDS
podman build --format docker --pull=never "${ca_args[@]}" -t "$IMAGE" . >"$work/build.log" 2>&1 \
  || { tail -n 40 "$work/build.log" >&2; fail "podman build of the Dockerfile"; }
build_seconds=$((SECONDS - build_started))

# --- Run it: embedded database, a port podman picks.
step "podman run $IMAGE"
run_started=$SECONDS
# (podman's healthcheck timers need systemd, absent here: its complaint goes to a log, and the
# image's HEALTHCHECK is run by hand below.)
podman run -d --name "$CONTAINER" -p 127.0.0.1::8080 "$IMAGE" >/dev/null 2>"$work/run.log" \
  || { cat "$work/run.log" >&2; fail "podman run"; }
port=$(podman port "$CONTAINER" 8080/tcp | head -n1 | sed 's/.*://')
[ -n "$port" ] || fail "no published port"
base="http://127.0.0.1:$port"
show_logs() { podman logs "$CONTAINER" 2>&1 | tail -n 30 >&2; }
until curl -fsS -o /dev/null "$base/readyz" 2>/dev/null; do
  [ "$(podman inspect -f '{{.State.Running}}' "$CONTAINER")" = "true" ] || { show_logs; fail "the container exited before /readyz"; }
  [ $((SECONDS - run_started)) -lt "$READY_TIMEOUT" ] || { show_logs; fail "/readyz not 200 after ${READY_TIMEOUT} s"; }
  sleep 0.5
done
ready_seconds=$((SECONDS - run_started))
step "/readyz 200 after ${ready_seconds} s"

key=$(podman logs "$CONTAINER" 2>/dev/null | sed -n 's/^ *demo API key: *\([^ ]*\).*/\1/p' | head -n1)
[ -n "$key" ] || { show_logs; fail "no demo API key in the banner"; }
status=$(curl -s -o "$work/wallet.json" -w '%{http_code}' -H "Authorization: Bearer $key" "$base/v1/wallet")
[ "$status" = 200 ] || { cat "$work/wallet.json" >&2; fail "GET /v1/wallet with the demo key answered $status"; }
step "GET /v1/wallet with the demo key: 200"

podman healthcheck run "$CONTAINER" >/dev/null 2>&1 || fail "the image's HEALTHCHECK reports unhealthy"
step "HEALTHCHECK: healthy"

pid1=$(podman exec "$CONTAINER" sh -c 'tr "\0" " " </proc/1/cmdline; echo; sed -n "s/^Uid:[[:space:]]*\([0-9]*\).*/\1/p" /proc/1/status')
pid1_command=$(echo "$pid1" | sed -n 1p)
pid1_uid=$(echo "$pid1" | sed -n 2p)
case "$pid1_command" in
  bun\ *|/usr/local/bin/bun\ *) ;;
  *) fail "PID 1 is \"$pid1_command\", not bun" ;;
esac
[ "$pid1_uid" = 1000 ] || fail "PID 1 runs as uid $pid1_uid, not 1000"
step "PID 1: ${pid1_command}as uid $pid1_uid"

# --- Stop as an orchestrator would: SIGTERM, 20 s before SIGKILL.
podman stop -t 20 "$CONTAINER" >/dev/null 2>>"$work/run.log" || { cat "$work/run.log" >&2; fail "podman stop"; }
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$CONTAINER")
[ "$exit_code" = 0 ] || { show_logs; fail "exit code $exit_code after podman stop -t 20"; }
last_line=$(podman logs "$CONTAINER" 2>&1 | grep -v '^[[:space:]]*$' | tail -n1)
case "$last_line" in
  *"Hookline stopped"*) ;;
  *) show_logs; fail "the last log line is not \"Hookline stopped\": $last_line" ;;
esac
step "podman stop -t 20: exit 0, \"Hookline stopped\""

size=$(podman image inspect -f '{{.Size}}' "$IMAGE")
echo "image:check passed in $((SECONDS - started)) s: build ${build_seconds} s, /readyz after ${ready_seconds} s," \
  "$IMAGE $((size / 1000000)) MB"
