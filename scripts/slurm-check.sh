#!/usr/bin/env bash
# Runs deploy/slurm/dataloaderd.sbatch for real on a one-node Slurm cluster
# made on this machine from Debian's packages (slurmctld, slurmd, munge),
# with examples/train_gpt.py as the training script on 2 ranks. Checks that
# the job succeeds, that every rank trained to the same last step over the
# whole epoch, and that nothing of the daemon is left: no process, socket or
# ring. Then it cancels a second, longer job in the middle of its training
# (scancel) and checks the same: nothing left. Needs root (it installs
# packages and starts the cluster's daemons, and stops them at the end).
# make slurm-check runs it; TORCH_VENV names the environment with torch
# (default: the repository's .venv-torch).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$repo/bin/dataloaderd
py=${TORCH_VENV:-$repo/.venv-torch}/bin/python
[ "$(id -u)" = 0 ] || { echo "slurm-check: run as root" >&2; exit 2; }
[ -x "$bin" ] || { echo "slurm-check: build first (make build)" >&2; exit 2; }
"$py" -c 'import torch' 2>/dev/null || { echo "slurm-check: needs .venv-torch (make test-torch makes it)" >&2; exit 2; }
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
fi

work=$(mktemp -d /tmp/slurm-check.XXXXXX)
chmod 755 "$work"
host=$(hostname)
cpus=$(nproc)
mem=$(( $(free -m | awk '/^Mem:/ {print $2}') - 1024 ))
mkdir -p "$work"/{state,spool,log,munge,munge-run,job}
cat > "$work/slurm.conf" <<CONF
ClusterName=check
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf

started=()
cleanup() {
  local code=$?
  # The cluster is this check's own: cancel whatever job of it still runs
  # before its daemons stop.
  local jobs
  mapfile -t jobs < <(squeue -h -o %i 2>/dev/null || true)
  if [ "${#jobs[@]}" -gt 0 ]; then
    scancel --full "${jobs[@]}" 2>/dev/null || true
    for _ in $(seq 60); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  for p in "${started[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [ "$code" != 0 ]; then
    echo "slurm-check FAILED; logs in $work" >&2
    tail -n 20 "$work"/log/*.log "$work"/job/*.out 2>/dev/null >&2 || true
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

# munge: a key of this check's own, a socket of its own.
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$work/munge" "$work/munge-run"
chmod 700 "$work/munge"
chmod 755 "$work/munge-run"
chmod 400 "$work/munge/munge.key"
runuser -u munge -- munged --key-file "$work/munge/munge.key" --socket "$work/munge-run/munge.socket" \
  --pid-file "$work/munge-run/munged.pid" --log-file "$work/munge/munged.log" --seed-file "$work/munge/seed"
started+=("$(cat "$work/munge-run/munged.pid")")
sed -i "1i AuthInfo=socket=$work/munge-run/munge.socket" "$SLURM_CONF"

slurmctld -D -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
started+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
started+=($!)
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 1
done
[ "$state" = idle ] || { echo "slurm-check: the node is '$state', not idle" >&2; exit 1; }

# The job: a small corpus of unique tokens, the example trainer on 2 ranks.
"$py" - "$work/job" <<'PY'
import json, sys
sys.path.insert(0, "clients/python/tests")
from corpus import make_corpus
d = sys.argv[1]
datasets, ranges = make_corpus(d)
cfg = {"seq_len": 16, "batch_size": 4, "seed": 3, "logical_shards": 12, "eos_id": 0, "epochs": 1, "datasets": datasets}
json.dump(cfg, open(f"{d}/job.json", "w"))
json.dump({"vocab": max(hi for _, hi in ranges), "tokens": sum(hi - lo for lo, hi in ranges)}, open(f"{d}/meta.json", "w"))
PY
vocab=$("$py" -c "import json; print(json.load(open('$work/job/meta.json'))['vocab'])")
mkdir -p "$work/job/shm"
chmod -R 777 "$work/job"
# A free port for torchrun's rendezvous (29500, the recipe's default, may be
# taken by another torchrun on this machine).
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
# submit NAME [sbatch flags]: the recipe on the example trainer, with its
# checkpoints and records in $work/job/NAME; prints the job id.
submit() {
  local name=$1
  shift
  mkdir -p "$work/job/$name/ckpt" "$work/job/$name/records"
  chmod -R 777 "$work/job/$name"
  sbatch --parsable "$@" --chdir "$repo" --output "$work/job/$name/slurm-%j.out" \
    --export "ALL,PATH=$(dirname "$py"):$PATH,DATALOADERD_BIN=$bin,NPROC_PER_NODE=2,RDZV_PORT=$port,DATALOADERD_ARGS=--shm-dir $work/job/shm --log-level warn" \
    deploy/slurm/dataloaderd.sbatch examples/train_gpt.py --config "$work/job/${config:-job.json}" --vocab "$vocab" \
    --ckpt "$work/job/$name/ckpt" --save-every 10 --records "$work/job/$name/records"
}
# nothing_left JOBID: no daemon of that job (the recipe's socket is
# /tmp/dataloaderd-JOBID.sock), no socket, no ring in the shm directory, no
# trainer of this check.
nothing_left() {
  local sock=/tmp/dataloaderd-$1.sock left
  left=$(pgrep -f -- "--socket $sock" || true)
  [ -z "$left" ] || { echo "slurm-check: job $1: daemon processes left: $left" >&2; exit 1; }
  [ ! -e "$sock" ] || { echo "slurm-check: job $1: socket left: $sock" >&2; exit 1; }
  left=$(ls -A "$work/job/shm")
  [ -z "$left" ] || { echo "slurm-check: job $1: files left in the shm dir: $left" >&2; exit 1; }
  left=$(pgrep -f -- "--records $work/job/" || true)
  [ -z "$left" ] || { echo "slurm-check: job $1: trainer processes left: $left" >&2; exit 1; }
}

start=$(date +%s)
job=$(submit whole --wait)
echo "slurm-check: job $job ran $(( $(date +%s) - start )) s"

# What it did: every rank to the same last step, every token exactly once.
"$py" - "$work/job" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
meta = json.load(open(f"{d}/meta.json"))
last, served = {}, []
for path in glob.glob(f"{d}/whole/records/rank-*-of-*.jsonl"):
    recs = [json.loads(l) for l in open(path)]
    last[os.path.basename(path)] = recs[-1]["step"]
    served += [t for r in recs for t in r["tokens"] if t != 0]
assert len(last) == 2, f"records of {sorted(last)}"
assert len(set(last.values())) == 1, f"ranks ended at different steps: {last}"
assert len(served) == len(set(served)) == meta["tokens"], (len(served), len(set(served)), meta["tokens"])
print(f"slurm-check: 2 ranks, {list(last.values())[0]} steps each, {len(served)} tokens, each once")
PY
nothing_left "$job"
echo "slurm-check: job $job left no daemon, socket or ring"

# scancel in the middle of training: 100 epochs would take minutes; the job
# is cancelled once both ranks have logged 5 steps.
"$py" -c "import json; c = json.load(open('$work/job/job.json')); c['epochs'] = 100; json.dump(c, open('$work/job/long.json', 'w'))"
job=$(config=long.json submit cancelled)
steps=0
for _ in $(seq 240); do
  steps=$(cat "$work"/job/cancelled/records/rank-*-of-2.jsonl 2>/dev/null | wc -l || true)
  [ "$steps" -ge 10 ] && break
  [ -n "$(squeue -h -j "$job" 2>/dev/null)" ] || { echo "slurm-check: job $job ended before it was cancelled" >&2; exit 1; }
  sleep 0.5
done
[ "$steps" -ge 10 ] || { echo "slurm-check: job $job logged $steps steps in 120 s" >&2; exit 1; }
start=$(date +%s)
scancel "$job"
for _ in $(seq 120); do
  [ -n "$(squeue -h -j "$job" 2>/dev/null)" ] || break
  sleep 0.5
done
state=$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]*')
[ "$state" = JobState=CANCELLED ] || { echo "slurm-check: job $job is $state after scancel" >&2; exit 1; }
nothing_left "$job"
echo "slurm-check: job $job cancelled after $steps rank-steps, gone in $(( $(date +%s) - start )) s, left no daemon, socket or ring"

# A SIGTERM to the batch script alone (as --signal=B:TERM@120 sends before the
# time limit): the recipe passes it on to the torchrun step at once, and
# stops the daemons only after that step has ended.
job=$(config=long.json submit stopped)
steps=0
for _ in $(seq 240); do
  steps=$(cat "$work"/job/stopped/records/rank-*-of-2.jsonl 2>/dev/null | wc -l || true)
  [ "$steps" -ge 10 ] && break
  [ -n "$(squeue -h -j "$job" 2>/dev/null)" ] || { echo "slurm-check: job $job ended before it was signalled" >&2; exit 1; }
  sleep 0.5
done
[ "$steps" -ge 10 ] || { echo "slurm-check: job $job logged $steps steps in 120 s" >&2; exit 1; }
steps_of=$(squeue --steps -h -j "$job" -o "%i %j")
trainer_step=$(awk '$2 == "torchrun" {print $1}' <<<"$steps_of")
daemon_step=$(awk '$2 == "dataloaderd" {print $1}' <<<"$steps_of")
if [ -z "$trainer_step" ] || [ -z "$daemon_step" ]; then echo "slurm-check: job $job's steps: $steps_of" >&2; exit 1; fi
start=$(date +%s)
scancel --batch --signal=TERM "$job"
for _ in $(seq 120); do
  [ -n "$(squeue -h -j "$job" 2>/dev/null)" ] || break
  sleep 0.5
done
[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || { echo "slurm-check: job $job still runs 60 s after its SIGTERM" >&2; exit 1; }
# slurmd logs the end of each step in turn: the daemons' step must end after
# the torchrun step.
ended() { grep -n -F "[$1] done with job" "$work/log/slurmd.log" | head -n 1 | cut -d: -f1 || true; }
sleep 1
t=$(ended "$trainer_step") d=$(ended "$daemon_step")
if [ -z "$t" ] || [ -z "$d" ]; then echo "slurm-check: slurmd.log has no end of step $trainer_step or $daemon_step" >&2; exit 1; fi
[ "$d" -gt "$t" ] || { echo "slurm-check: job $job: the daemons' step $daemon_step ended before the torchrun step $trainer_step" >&2; exit 1; }
nothing_left "$job"
echo "slurm-check: job $job stopped by SIGTERM after $steps rank-steps (torchrun step $trainer_step ended before the daemons' step $daemon_step), gone in $(( $(date +%s) - start )) s ($(scontrol show job "$job" | grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+' | tr '\n' ' ')), left no daemon, socket or ring"
echo "slurm-check: OK"
