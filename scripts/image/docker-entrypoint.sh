#!/bin/sh
# The official oven/bun image's entrypoint: a first argument that is a flag or not a command
# runs under bun; anything else is exec'd as given (so bun, not a shell, is PID 1).
set -e

if [ "${1#-}" != "${1}" ] || [ -z "$(command -v "${1}")" ]; then
  set -- /usr/local/bin/bun "$@"
fi

exec "$@"
