#!/usr/bin/env bash
# Start dataloaderd on this node, wait until it serves, run torchrun with the
# arguments given, stop the daemon once torchrun has exited, and exit with
# torchrun's code.
#
#   deploy/torchrun-with-dataloaderd.sh --nproc-per-node 8 train.py --config cfg.yaml
#
# Environment: DATALOADERD_BIN (default: dataloaderd on PATH),
# DATALOADERD_SOCKET (default: $XDG_RUNTIME_DIR or /tmp, per job),
# DATALOADERD_ARGS (extra serve flags, e.g. "--allow-root /data --metrics-addr :9400"),
# DATALOADERD_KILL_GRACE (default 5s: what the job's processes get between
# SIGTERM and SIGKILL once this script has died).
#
# Stopping: SIGTERM and SIGINT go to torchrun (which stops its workers); the
# daemon is stopped only after torchrun has exited, so no rank loses its
# batches while it shuts down. Each child runs in a process group of its own,
# so a Ctrl-C in a terminal reaches only this script, which forwards it.
# If this script is killed (SIGKILL), the kernel sends SIGTERM to the daemon
# (serve --exit-with-parent) and to torchrun (util-linux setpriv --pdeathsig,
# when installed; without it the script warns).
#
# Dying however it dies, this script takes its job with it: it marks every
# process it starts with a random DATALOADERD_WRAPPER_TOKEN in the
# environment (torchrun and the ranks inherit it) and starts a lifeline,
# `dataloaderd watch`, in a session of its own. When this script is gone,
# even killed with its whole session (torchrun too, which then cannot stop
# its workers: they have sessions of their own), the watcher sends SIGTERM,
# then SIGKILL after the grace, to this user's processes that carry the
# token, then to the daemon, and removes the socket if nothing answers on
# it. On a normal exit the script stops the watcher, which stops nothing.
# At start, the watcher also removes the default sockets of wrappers that are
# gone (dataloaderd-PID.sock where no process has PID and nothing answers).
set -euo pipefail
bin=${DATALOADERD_BIN:-dataloaderd}
socket_dir=${XDG_RUNTIME_DIR:-/tmp}
export DATALOADERD_SOCKET=${DATALOADERD_SOCKET:-$socket_dir/dataloaderd-$$.sock}
# The mark of this job's processes: everything started from here inherits it.
read -r DATALOADERD_WRAPPER_TOKEN </proc/sys/kernel/random/uuid
export DATALOADERD_WRAPPER_TOKEN
daemon='' trainer='' forwarded='' watcher=''

stop_daemon() {
  if [ -n "$daemon" ]; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=''
  fi
}
# stop_watcher stops the watcher, and nothing else: this is a normal exit.
stop_watcher() {
  if [ -n "$watcher" ]; then
    kill -TERM "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    watcher=''
  fi
}
# start_watcher starts the lifeline (dataloaderd watch) and waits until it
# leads a session of its own, out of reach of a kill of this one.
start_watcher() {
  local stat fields
  "$bin" watch --pid $$ --token "$DATALOADERD_WRAPPER_TOKEN" --daemon "$daemon" \
    --socket "$DATALOADERD_SOCKET" --sweep "$socket_dir" --grace "${DATALOADERD_KILL_GRACE:-5s}" &
  watcher=$!
  for _ in $(seq 100); do
    if read -r stat 2>/dev/null <"/proc/$watcher/stat"; then
      read -r -a fields <<<"${stat##*) }"
      [ "${fields[3]}" = "$watcher" ] && return 0
    fi
    kill -0 "$watcher" 2>/dev/null || break
    sleep 0.1
  done
  echo "torchrun-with-dataloaderd: dataloaderd watch did not start: the job would outlive a kill of this script's session" >&2
  stop_watcher
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
trap 'stop_daemon; stop_watcher' EXIT
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
start_watcher

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
