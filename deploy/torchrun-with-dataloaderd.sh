#!/usr/bin/env bash
# Start dataloaderd on this node, wait until it serves, run torchrun with the
# arguments given, stop the daemon once torchrun has exited, and exit with
# torchrun's code.
#
#   deploy/torchrun-with-dataloaderd.sh --nproc-per-node 8 train.py --config cfg.yaml
#
# Environment: DATALOADERD_BIN (default: dataloaderd on PATH),
# DATALOADERD_SOCKET (default: $XDG_RUNTIME_DIR or /tmp, per job),
# DATALOADERD_ARGS (extra serve flags, e.g. "--allow-root /data --metrics-addr :9400").
#
# Stopping: SIGTERM and SIGINT go to torchrun (which stops its workers); the
# daemon is stopped only after torchrun has exited, so no rank loses its
# batches while it shuts down. Each child runs in a process group of its own,
# so a Ctrl-C in a terminal reaches only this script, which forwards it.
# If this script is killed (SIGKILL), the kernel sends SIGTERM to the daemon
# (serve --exit-with-parent) and to torchrun (util-linux setpriv --pdeathsig,
# when installed): nothing is left running, and the daemon removes its
# socket and rings as on any stop.
set -euo pipefail
bin=${DATALOADERD_BIN:-dataloaderd}
export DATALOADERD_SOCKET=${DATALOADERD_SOCKET:-${XDG_RUNTIME_DIR:-/tmp}/dataloaderd-$$.sock}
daemon='' trainer='' forwarded=''

stop_daemon() {
  if [ -n "$daemon" ]; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=''
  fi
}
# on_signal forwards a signal to torchrun, or ends the script (and with it
# the daemon) when torchrun is not running yet.
on_signal() {
  if [ -z "$trainer" ]; then
    exit $((128 + $(kill -l "$1")))
  fi
  if kill -s "$1" "$trainer" 2>/dev/null; then
    forwarded=1
  fi
}
# in_own_group starts "$@" in the background in a process group of its own
# (job control on just for it): out of reach of a terminal's Ctrl-C, and with
# SIGINT not ignored, as it would be in a background job without job control.
in_own_group() {
  set -m
  "$@" &
  set +m
}
trap stop_daemon EXIT
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# shellcheck disable=SC2086
in_own_group "$bin" serve --socket "$DATALOADERD_SOCKET" --exit-with-parent $$ ${DATALOADERD_ARGS:-}
daemon=$!
for _ in $(seq 100); do
  "$bin" healthcheck --socket "$DATALOADERD_SOCKET" --timeout 1s >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { echo "dataloaderd exited before serving" >&2; exit 1; }
  sleep 0.1
done
"$bin" healthcheck --socket "$DATALOADERD_SOCKET" >/dev/null

pdeathsig=''
case "$(setpriv --help 2>/dev/null || true)" in *--pdeathsig*) pdeathsig=1 ;; esac
if [ -n "$pdeathsig" ]; then
  # The shell between setpriv and torchrun closes the race of this script
  # dying before the kernel was asked: then its parent is no longer $$.
  # shellcheck disable=SC2016
  in_own_group setpriv --pdeathsig TERM -- sh -c '[ "$PPID" = "$1" ] || exit 143; shift; exec torchrun "$@"' \
    torchrun-with-dataloaderd "$$" "$@"
else
  echo "torchrun-with-dataloaderd: no setpriv with --pdeathsig (util-linux 2.33+): torchrun would outlive a SIGKILL of this script" >&2
  in_own_group torchrun "$@"
fi
trainer=$!
# wait returns early when a trapped signal arrives; wait again until
# torchrun itself has exited.
while :; do
  forwarded=''
  code=0
  wait "$trainer" || code=$?
  [ -n "$forwarded" ] || break
done
stop_daemon
exit "$code"
