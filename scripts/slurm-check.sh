#!/usr/bin/env bash
# Runs deploy/slurm/dataloaderd.sbatch for real on a one-node Slurm cluster
# made on this machine from Debian's packages (slurmctld, slurmd, munge),
# with examples/train_gpt.py as the training script on 2 ranks. Checks that
# the job succeeds, that every rank trained to the same last step over the
# whole epoch, and that nothing of the daemon is left: no process, socket or
# ring. Needs root (it installs packages and starts the cluster's daemons,
# and stops them at the end). make slurm-check runs it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$repo/bin/dataloaderd
py=$repo/.venv-torch/bin/python
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
mkdir -p "$work/job/shm" "$work/job/ckpt" "$work/job/records"
chmod -R 777 "$work/job"
start=$(date +%s)
sbatch --wait --chdir "$repo" --output "$work/job/slurm-%j.out" \
  --export "ALL,PATH=$(dirname "$py"):$PATH,DATALOADERD_BIN=$bin,NPROC_PER_NODE=2,DATALOADERD_ARGS=--shm-dir $work/job/shm --log-level warn" \
  deploy/slurm/dataloaderd.sbatch examples/train_gpt.py --config "$work/job/job.json" --vocab "$vocab" \
  --ckpt "$work/job/ckpt" --save-every 10 --records "$work/job/records"
echo "slurm-check: the job ran $(( $(date +%s) - start )) s"

# What it did: every rank to the same last step, every token exactly once.
"$py" - "$work/job" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
meta = json.load(open(f"{d}/meta.json"))
last, served = {}, []
for path in glob.glob(f"{d}/records/rank-*-of-*.jsonl"):
    recs = [json.loads(l) for l in open(path)]
    last[os.path.basename(path)] = recs[-1]["step"]
    served += [t for r in recs for t in r["tokens"] if t != 0]
assert len(last) == 2, f"records of {sorted(last)}"
assert len(set(last.values())) == 1, f"ranks ended at different steps: {last}"
assert len(served) == len(set(served)) == meta["tokens"], (len(served), len(set(served)), meta["tokens"])
print(f"slurm-check: 2 ranks, {list(last.values())[0]} steps each, {len(served)} tokens, each once")
PY

# Nothing of the daemon is left.
left=$(pgrep -f "dataloaderd serve --socket /tmp/dataloaderd-" || true)
[ -z "$left" ] || { echo "slurm-check: daemon processes left: $left" >&2; exit 1; }
ls /tmp/dataloaderd-*.sock >/dev/null 2>&1 && { echo "slurm-check: socket left: $(ls /tmp/dataloaderd-*.sock)" >&2; exit 1; }
[ -z "$(ls -A "$work/job/shm")" ] || { echo "slurm-check: files left in the shm dir: $(ls "$work/job/shm")" >&2; exit 1; }
echo "slurm-check: OK (no daemon, socket or ring left)"
