#!/bin/sh
# Like the official image: `redis-server ARGS` or just ARGS, reachable from the other containers without a
# password (protected mode off: the port is only inside the compose network).
set -eu
if [ "${1:-}" = redis-server ]; then
    shift
fi
exec redis-server "$@" --protected-mode no
