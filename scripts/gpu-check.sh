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

# The client's generated stubs refuse a grpcio or protobuf older than their
# generator's (clients/python/pyproject.toml). A GPU image without network may
# have older ones: carry wheels (e.g. into .whl, named in the device call's
# carry, and installed with pip --no-index --target before running this).
"$PYTHON" - <<'PY' || die "the client cannot be imported here (see above): carry wheels of the versions clients/python/pyproject.toml asks for, e.g. 'pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64 -d .whl grpcio==1.85.1 protobuf==7.36.2', install them with 'pip install --no-index --no-deps --target /tmp/site .whl/*.whl' and set PYTHONPATH=/tmp/site"
import sys
sys.path.insert(0, "clients/python/src")
try:
    import grpc, google.protobuf
    print(f"client runtime: grpcio {grpc.__version__}, protobuf {google.protobuf.__version__}")
    from dataloaderd._proto import dataloader_pb2, dataloader_pb2_grpc  # noqa: F401
except Exception as e:  # a version check of the stubs, or a missing package
    print(f"gpu-check: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
PY

exec "$PYTHON" scripts/gpu_check.py --daemon "$DAEMON" "$@"
