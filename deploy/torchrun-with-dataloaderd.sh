#!/usr/bin/env bash
# Start dataloaderd on this node, wait until it serves, run torchrun with the
# arguments given, and stop the daemon when torchrun exits (whatever its code).
#
#   deploy/torchrun-with-dataloaderd.sh --nproc-per-node 8 train.py --config cfg.yaml
#
# Environment: DATALOADERD_BIN (default: dataloaderd on PATH),
# DATALOADERD_SOCKET (default: $XDG_RUNTIME_DIR or /tmp, per job),
# DATALOADERD_ARGS (extra serve flags, e.g. "--allow-root /data --metrics-addr :9400").
set -euo pipefail
bin=${DATALOADERD_BIN:-dataloaderd}
export DATALOADERD_SOCKET=${DATALOADERD_SOCKET:-${XDG_RUNTIME_DIR:-/tmp}/dataloaderd-$$.sock}
# shellcheck disable=SC2086
"$bin" serve --socket "$DATALOADERD_SOCKET" ${DATALOADERD_ARGS:-} &
daemon=$!
stop() { kill -TERM "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; }
trap stop EXIT
for _ in $(seq 100); do
  "$bin" healthcheck --socket "$DATALOADERD_SOCKET" --timeout 1s >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { echo "dataloaderd exited before serving" >&2; exit 1; }
  sleep 0.1
done
"$bin" healthcheck --socket "$DATALOADERD_SOCKET" >/dev/null
torchrun "$@"
