"""scripts/gpu_check.py, what the device paths carry beside the tokens and how
they ride through a daemon restart: the metadata arrays of a batch (in the
same slot as its tokens) equal shm's on the GPU; the daemon killed (-9) and
terminated mid-run and started again on its socket, each device path goes on
with the batches a run never interrupted gives, and the lost sessions'
device memory is let go."""
import gc
import os
import signal
import subprocess
import threading
import time
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple, cast

import numpy as np
import numpy.typing as npt

from dataloaderd import Loader, Transport, _cuda
from gpu_check_report import check, results

META = ["position_ids", "document_ids", "cu_seqlens", "loss_mask", "dataset_ids"]
# With the default dtype (int64) a batch also carries input_ids, labels and
# shift_labels, made by the client from the slot's tokens (on the GPU for cuda).
INT64_KEYS = ["input_ids", "labels", "shift_labels"]
KEYS = ["tokens", "input_ids", "labels", "shift_labels", "position_ids", "document_ids", "cu_seqlens",
        "line_segments", "loss_mask", "dataset_ids"]
DEVICE_PATHS: List[Tuple[str, Transport, bool]] = [("cuda, control block", "cuda", True), ("cuda, messages", "cuda", False),
                ("shm-pinned", "shm-pinned", True)]
Arrays = Dict[str, npt.NDArray[Any]]


def host(value: Any) -> npt.NDArray[Any]:
    """A batch's array as a host copy, from numpy or a (device) tensor."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return np.asarray(value.detach().cpu().numpy()).copy()


def metadata_config(config: Dict[str, Any]) -> Dict[str, Any]:
    return dict(config, metadata=META, mask_document_boundaries=True)


def arrays(batch: Any) -> Arrays:
    """A batch's arrays as host copies."""
    row = cast(Dict[str, Any], batch)
    out = {k: host(row[k]) for k in KEYS}
    out["step"] = np.array(row["step"])
    return out


def take(loader: Loader, n: int) -> List[Arrays]:
    out: List[Arrays] = []
    for batch in loader:
        out.append(arrays(batch))
        if len(out) == n:
            break
    return out


def same(want: List[Arrays], got: List[Arrays]) -> bool:
    return len(want) == len(got) and all(
        w[k].dtype == g[k].dtype and np.array_equal(w[k], g[k]) for w, g in zip(want, got) for k in KEYS)


def metadata(torch: ModuleType, config: Dict[str, Any], sock: str, device: int, n: int) -> None:
    """Every metadata array of n batches equals shm's, on each device path."""
    cfg = metadata_config(config)
    with Loader(cfg, dp_rank=0, dp_size=1, socket=sock, job="gpucheck-meta-ref", copy=True) as ref:
        want = take(ref, n)
    check(len(want) == n, f"{len(want)} reference batches with {', '.join(META)}")
    for name, transport, fast in DEVICE_PATHS:
        with Loader(cfg, dp_rank=0, dp_size=1, socket=sock, job=f"gpucheck-meta-{transport}-{int(fast)}",
                    transport=transport, fast=fast, device=device) as ld:
            first = cast(Dict[str, Any], next(iter(ld)))
            on_gpu = transport != "cuda" or all(getattr(first[k], "is_cuda", False) for k in KEYS)
            del first
        with Loader(cfg, dp_rank=0, dp_size=1, socket=sock, job=f"gpucheck-meta2-{transport}-{int(fast)}",
                    transport=transport, fast=fast, device=device) as ld:
            got = take(ld, n)
        check(on_gpu and same(want, got),
              f"{name}: {len(got)} batches, tokens and every metadata array equal to shm's"
              + (", as device tensors" if transport == "cuda" else ""))
    host_path: List[Tuple[str, Transport, bool]] = [("shm", "shm", True)]
    for name, transport, fast in host_path + DEVICE_PATHS:
        held_keys(cfg, sock, device, name, transport, fast, want)


def held_keys(cfg: Dict[str, Any], sock: str, device: int, name: str, transport: Transport, fast: bool,
              want: List[Arrays]) -> None:
    """The int64 keys the client makes are the trainer's to keep: every
    batch's input_ids, labels and shift_labels, held (not copied) while the
    loader goes on, still equal shm's at the end."""
    kept: List[Dict[str, Any]] = []
    with Loader(cfg, dp_rank=0, dp_size=1, socket=sock, job=f"gpucheck-held-{transport}-{int(fast)}",
                transport=transport, fast=fast, device=device) as ld:
        for batch in ld:
            row = cast(Dict[str, Any], batch)
            kept.append({k: row[k] for k in INT64_KEYS})
            if len(kept) == len(want):
                break
    ok = len(kept) == len(want) and all(np.array_equal(host(k[key]), w[key])
                                        for k, w in zip(kept, want) for key in INT64_KEYS)
    check(ok, f"{name}: {', '.join(INT64_KEYS)} of {len(kept)} batches held by the trainer keep their values")


class Restartable:
    """A daemon of its own on a fixed socket and shm directory, killed and
    started again when asked (as systemd's Restart= would)."""

    def __init__(self, binary: str, tmp: str, log: Any):
        self.binary, self.log = binary, log
        self.socket = os.path.join(tmp, "restart.sock")
        self.shm = os.path.join(tmp, "restart-shm")
        os.makedirs(self.shm, exist_ok=True)
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.pending: Optional[threading.Timer] = None
        self.starts = 0
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, "serve", "--socket", self.socket, "--shm-dir", self.shm,
                                      "--log-level", "warn"], stdout=self.log, stderr=self.log)
        self.starts += 1
        for _ in range(300):
            if subprocess.run([self.binary, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError("the restarted daemon did not become healthy")

    def restart(self, sig: int) -> None:
        """Stops the daemon with sig and starts it again 0.3 s later."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)
        self.pending = threading.Timer(0.3, self.start)
        self.pending.start()

    def stop(self) -> None:
        # A loader can be back on the new daemon before the restart's own
        # health check has seen it: that start ends first.
        if self.pending is not None:
            self.pending.join(timeout=60)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def restarts(torch: ModuleType, binary: str, config: Dict[str, Any], tmp: str, device: int, n: int) -> None:
    """Each device path reads n batches (with metadata) while its daemon is
    killed at a third of them and terminated at two thirds; the batches equal
    those of a run never interrupted, and the client lets go of the lost
    rings' device memory."""
    cfg = metadata_config(config)
    kill_at = {max(2, n // 3): signal.SIGKILL, max(3, 2 * n // 3): signal.SIGTERM}
    with open(os.path.join(tmp, "restart-daemon.log"), "ab") as log:
        d = Restartable(binary, tmp, log)
        try:
            with Loader(cfg, dp_rank=0, dp_size=1, socket=d.socket, job="gpucheck-restart-ref", copy=True) as ref:
                want = take(ref, n)
            # A pass of each path first: torch's kernels
            # load and its cache grows at first use, not at each ring.
            for name, transport, fast in DEVICE_PATHS:
                with Loader(cfg, dp_rank=0, dp_size=1, socket=d.socket, job=f"gpucheck-warm-{transport}-{int(fast)}",
                            transport=transport, fast=fast, device=device) as ld:
                    take(ld, n)
            d.stop()
            free_before = settled_free(device)  # no daemon: its context is not counted
            reserved_before = torch.cuda.memory_reserved(device)
            d.start()
            for name, transport, fast in DEVICE_PATHS:
                got: List[Arrays] = []
                with Loader(cfg, dp_rank=0, dp_size=1, socket=d.socket, job=f"gpucheck-restart-{transport}-{int(fast)}",
                            transport=transport, fast=fast, device=device) as ld:
                    for batch in ld:
                        got.append(arrays(batch))
                        del batch
                        if len(got) == n:
                            break
                        if len(got) in kill_at:
                            d.restart(kill_at[len(got)])
                    reconnects = ld.reconnects
                steps = [int(g["step"]) for g in got]
                check(reconnects == 2 and steps == list(range(1, n + 1)) and same(want, got),
                      f"{name}: {len(got)} batches through a kill -9 and a SIGTERM of the daemon "
                      f"({reconnects} reconnects), equal to a run never interrupted")
        finally:
            d.stop()
    # The daemons are gone: what the GPU holds beyond the start, once the
    # readings settle, is what this process kept of the lost rings (their
    # IPC mappings) and torch's cache grew by.
    gc.collect()
    torch.cuda.synchronize(device)
    held = (free_before - settled_free(device)) / 2**20
    cache = (torch.cuda.memory_reserved(device) - reserved_before) / 2**20
    results["gpu_mib"]["held after the restarts, daemon stopped"] = round(held, 1)
    results["gpu_mib"]["of which torch's cache"] = round(cache, 1)
    check(held - cache < 8, f"{held:.1f} MiB more GPU memory in use than before the restarts once the daemon "
                             f"stopped, {cache:.1f} MiB of it torch's cache (the lost rings' mappings let go)")


def settled_free(device: int) -> int:
    """The GPU's free bytes, read until two readings 0.5 s apart agree (10 s at most)."""
    last = -1
    for _ in range(20):
        free, _ = _cuda.device_memory(device)
        if free == last:
            break
        last = free
        time.sleep(0.5)
    return last
