#!/usr/bin/env bash
# GPU delivery check: run on a machine with an NVIDIA GPU, PyTorch with CUDA,
# and the daemon binary built elsewhere (no Go needed here):
#
#   scripts/gpu-check.sh [--daemon bin/dataloaderd] [--device N] [--batches N]
#
# Build the binary with CGO_ENABLED=0 so it runs on older glibc:
#   CGO_ENABLED=0 go build -o bin/dataloaderd ./cmd/dataloaderd
# Exit status: 0 passed, 1 a check failed, 2 this machine cannot run it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DAEMON=${DATALOADERD_BIN:-bin/dataloaderd}

die() { echo "gpu-check: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null || die "no nvidia-smi: this machine has no NVIDIA driver (no GPU to check)"
gpus=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null) \
  || die "nvidia-smi found no GPU"
[ -n "$gpus" ] || die "nvidia-smi lists no GPU"
echo "GPUs:"; echo "$gpus" | sed 's/^/  /'

for a in "$@"; do case $a in --daemon=*) DAEMON=${a#--daemon=};; esac; done
prev=""; for a in "$@"; do [ "$prev" = "--daemon" ] && DAEMON=$a; prev=$a; done
[ -x "$DAEMON" ] || die "no daemon binary at $DAEMON: build it with 'CGO_ENABLED=0 go build -o bin/dataloaderd ./cmd/dataloaderd' and carry it here"
"$DAEMON" --help >/dev/null 2>&1 || "$DAEMON" help >/dev/null 2>&1 || true

"$PYTHON" - <<'PY' || die "PyTorch with CUDA is needed (pip install torch, numpy, grpcio, protobuf)"
import sys
import torch
sys.exit(0 if torch.cuda.is_available() else 1)
PY

exec "$PYTHON" scripts/gpu_check.py --daemon "$DAEMON" "$@"
