#!/usr/bin/env python3
"""GPU delivery check, for a machine with a GPU, PyTorch and bin/dataloaderd.

    python scripts/gpu_check.py --daemon bin/dataloaderd [--device 0] [--batches 200]
        [--batch-size 8] [--seq-len 4096] [--step-ms 2] [--json results.json]

Run through scripts/gpu-check.sh, which checks the machine first. Each stage
runs even when an earlier one failed, and the summary comes last:

1. ipc-selftest: a child process allocates device memory with the driver,
   fills it and exports it by CUDA IPC; this process opens it with
   dataloaderd._cuda.IpcRing and compares bytes (the client half of the
   cuda transport, without the daemon).
2. shm reference: the batches read over shm, copied: the bits to match.
3. bit-identity: shm + .to(device), shm-pinned, cuda (control block and
   messages, views and clones) each deliver exactly the reference batches,
   as int32 tensors on the device; so does a cuda session shared by a group
   of two consumers, on GPUs 0 and 1 (both on 0 when there is one GPU).
4. torch host-to-device copies of the same bytes in the same run (pageable
   and pinned, per batch and as one copy), and shm with no device copy (the
   daemon's own rate on this machine).
5. measure, one session per path: open to first batch on the device; after
   20 warm batches, the GB/s at which the path lands batches on the GPU with
   one kernel reading each; then the time next() (and for shm + .to(), its
   copy) takes per batch under a training step of --step-ms of GPU work that
   the trainer synchronizes on; then the same steps with the trainer running
   ahead (no sync), timed against those steps with no loader just before
   and after.
6. metadata: position_ids, document_ids, cu_seqlens, loss_mask and
   dataset_ids on each device path equal shm's (scripts/gpu_check_restart.py).
7. GPU memory: the daemon's, idle, with one and two cuda sessions open and
   after they closed; a trainer killed with SIGKILL mid-run; at the end the
   daemon holds none.
8. restarts: a daemon of its own is killed (-9) and terminated mid-run and
   started again; each device path goes on with exactly the batches of a run
   never interrupted, and no GPU memory of the lost rings stays in use.

Exit status: 0 all checks passed, 1 a check failed, 2 no GPU or no torch.
"""
import argparse
import importlib
import json
import os
import sys
import tempfile
import warnings
from types import ModuleType
from typing import Any, Dict

warnings.filterwarnings("ignore", message=".*not writable.*")  # torch views of the read-only shm ring

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
sys.path.insert(0, HERE)
from benchmark.corpus import write_corpus  # noqa: E402
from daemon import running  # noqa: E402
from dataloaderd import CudaUnavailableError, _cuda  # noqa: E402
from gpu_check_memory import daemon_memory, device_copies, free_port, killed_client, wait_gpu_mib  # noqa: E402
from gpu_check_paths import (Path, bit_identity, gpu_step, group, host_rate, ipc_selftest, measure,  # noqa: E402
                             paths, shm_reference, steps_alone, torch_baseline)
from gpu_check_report import check, failures, results, stage  # noqa: E402
from gpu_check_restart import metadata, restarts  # noqa: E402


def need_gpu() -> ModuleType:
    """torch, when it has a GPU; else exits 2 saying why."""
    try:
        _cuda._torch()
    except CudaUnavailableError as e:
        print(f"gpu-check: {e}", file=sys.stderr)
        sys.exit(2)
    return importlib.import_module("torch")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", default="bin/dataloaderd")
    ap.add_argument("--device", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    ap.add_argument("--batches", type=int, default=500, help="batches per pass")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--step-ms", type=float, default=2.0, help="GPU work per training step in the wait pass")
    ap.add_argument("--corpus-mb", type=int, default=256)
    ap.add_argument("--json", help="write the figures here")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    torch = need_gpu()
    torch.cuda.set_device(args.device)
    name = torch.cuda.get_device_name(args.device)
    print(f"GPU {args.device}: {name}, torch {torch.__version__}, "
          f"batches of {args.batch_size}x{args.seq_len + 1} int32", flush=True)
    results.update(gpu=name, torch=torch.__version__, batch=[args.batch_size, args.seq_len + 1],
                   batches=args.batches, step_ms=args.step_ms)
    nbytes = args.batch_size * (args.seq_len + 1) * 4

    stage("ipc-selftest: open a CUDA IPC handle another process exported", ipc_selftest, torch, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "corpus")
        write_corpus(prefix, args.corpus_mb << 19, 0)
        sock = os.path.join(tmp, "d.sock")
        config = {"seq_len": args.seq_len, "batch_size": args.batch_size, "seed": 1, "logical_shards": 64,
                  "eos_id": 0, "datasets": [{"name": "web", "path": prefix, "format": "megatron"}]}
        metrics_addr = f"127.0.0.1:{free_port()}"
        with running(args.daemon, sock, "--log-level", "warn", "--metrics-addr", metrics_addr) as proc:
            check_paths(args, torch, config, sock, nbytes)
            stage("metadata on the device paths", metadata, torch, config, sock, args.device, min(args.batches, 200))
            stage("daemon GPU memory", daemon_memory, torch, config, sock, args.device, proc.pid)
            stage("a trainer killed mid-run", killed_client, config, sock, args.device, proc.pid)
            results["device_copies"] = stage("the daemon's device copies (metrics)", device_copies, metrics_addr)
            final = wait_gpu_mib(proc.pid, 0, 10)
            results["gpu_mib"]["daemon at the end"] = final
            if final is not None:
                check(final == 0, "the daemon holds no GPU memory once every client is gone")
        stage("the device paths through daemon restarts", restarts, torch, args.daemon, config, tmp, args.device, 60)
    free, total = _cuda.device_memory(args.device)
    results["gpu_mib"]["GPU free at the end"] = free >> 20
    results["gpu_mib"]["GPU total"] = total >> 20
    print_summary(args, name, nbytes)
    results["failures"] = failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if failures:
        print(f"gpu-check: {len(failures)} check(s) failed: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("gpu-check: all checks passed")


def check_paths(args: argparse.Namespace, torch: ModuleType, config: Dict[str, Any], sock: str, nbytes: int) -> None:
    """Stages 2 to 5: the shm reference, bit-identity of every path, torch's
    own copies, and the measurements of each path."""
    ref = stage("shm reference", shm_reference, config, sock, args.batches) or []

    if ref:
        for p in paths(torch, config, sock, args.device) + [
                Path("cuda, clones", torch, config, sock, args.device, "cuda", copy=True)]:
            stage(f"bit-identity: {p.name}", bit_identity, p, ref)
        stage("bit-identity: a cuda group of two consumers", group, torch, config, sock, ref)
        rates = stage("torch host-to-device, same bytes", torch_baseline, torch, args.device, ref) or {}
        results["rates_gbps"].update(rates)
    results["rates_gbps"]["shm, no device copy (daemon rate)"] = stage(
        "shm without a device copy", host_rate, config, sock, args.batches, nbytes)
    step = gpu_step(torch, args.device, args.step_ms)

    def alone() -> float:
        return steps_alone(torch, args.device, args.batches, step)

    results["steps_alone_s"] = alone()  # also warms the GPU's clock
    for p in paths(torch, config, sock, args.device):
        m = stage(f"measure: {p.name}", measure, p, args.batches, step, alone, nbytes)
        if m:
            results["rates_gbps"][p.name] = m["gbps"]
            results["waits_us"][p.name] = m["wait_us"]
            results.setdefault("first_batch_ms", {})[p.name] = m["first_batch_ms"]
            results.setdefault("steps_ratio", {})[p.name] = round(m["steps_ratio"], 3)


def print_summary(args: argparse.Namespace, name: str, nbytes: int) -> None:
    print(f"\nGPU {args.device}: {name}; torch {results['torch']}; {args.batches} batches of "
          f"{args.batch_size}x{args.seq_len + 1} int32 ({nbytes / 2**20:.2f} MiB) per pass")
    print("into the device, GB/s (same bytes, same run):")
    for k, v in results["rates_gbps"].items():
        print(f"  {k:<40}{'-' if v is None else f'{v:8.2f}'}")
    print("open to first batch on the device (ms):")
    for k, v in results.get("first_batch_ms", {}).items():
        print(f"  {k:<40}{v:8.1f}")
    print(f"trainer wait per batch under a {args.step_ms} ms GPU step (us):")
    for k, v in results["waits_us"].items():
        print(f"  {k:<40}p50 {v['p50']:>8.1f}  p99 {v['p99']:>8.1f}  max {v['max']:>8.1f}")
    print(f"{args.batches} steps of {args.step_ms} ms, trainer running ahead: time with the loader / "
          f"the same steps alone (about {results.get('steps_alone_s', 0) * 1e3:.0f} ms); 1.00: the GPU never waits:")
    for k, v in results.get("steps_ratio", {}).items():
        print(f"  {k:<40}{v:8.3f}")
    c = results.get("device_copies")
    if c:
        print(f"the daemon's copies into device slots (dataloaderd_device_copy_seconds, every cuda batch of the run): "
              f"{c['copies']}, mean {c['mean_us']} us, half under {c['p50_under_us']} us, "
              f"99% under {c['p99_under_us']} us (None: above the largest bucket)")
    print("GPU memory (MiB, nvidia-smi per process):")
    for k, v in results["gpu_mib"].items():
        print(f"  {k:<40}{v}")


if __name__ == "__main__":
    main()
