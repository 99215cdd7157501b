"""The default job name: what keeps the sessions of two jobs on one node-wide
daemon apart, and puts the processes of one job into the same sessions.

A session is one (job, dp_rank) on one node's daemon. So every process of one
job on a node must compute the same name (the consumers of a tensor-parallel
group share a session), and two jobs on a node must compute different ones.
In order:

1. ``DATALOADERD_JOB``;
2. ``TORCHELASTIC_RUN_ID``, unless it is ``none`` (what plain ``torchrun``
   without ``--rdzv-id`` or ``--standalone`` sets) or empty;
3. under a launcher that sets ``MASTER_ADDR`` and ``MASTER_PORT`` (torchrun
   does): ``torchrun-<addr>:<port>-<pid>.<start>``, where pid and start
   identify the launching process (torchrun's agent), found as the nearest
   ancestor not started as a rank (one without ``LOCAL_RANK`` in its initial
   environment), so ranks started through a shell of their own agree too. Two
   jobs running at once cannot share a master address and port, and a later
   job on the same port has another launcher;
4. ``default``.
"""

from __future__ import annotations

import os
from typing import List, Mapping, Optional, Tuple

__all__ = ["default_job"]

PROC = "/proc"
_MAX_HOPS = 8  # ancestors looked at for the launcher


def default_job(environ: Mapping[str, str] = os.environ, pid: Optional[int] = None) -> str:
    """The job name of a process (``pid``, default this one) whose environment
    is ``environ``, when the loader is given none."""
    explicit = environ.get("DATALOADERD_JOB", "")
    if explicit:
        return explicit
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return run_id
    addr, port = environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", "")
    if addr and port:
        launcher, start = _launcher(os.getpid() if pid is None else pid)
        return f"torchrun-{addr}:{port}-{launcher}.{start}"
    return "default"


def _launcher(pid: int) -> Tuple[int, str]:
    """The PID and start time of the process that launched rank process
    ``pid``: its nearest ancestor without LOCAL_RANK in its environment
    (the parent when /proc cannot say)."""
    parent = _parent(pid)
    if parent is None:
        return os.getppid(), "0"
    for _ in range(_MAX_HOPS):
        if parent <= 1 or not _started_as_rank(parent):
            break
        up = _parent(parent)
        if up is None:
            break
        parent = up
    return parent, _start_time(parent)


def _stat_fields(pid: int) -> Optional[List[str]]:
    """The fields of /proc/<pid>/stat after the command name (which may hold
    spaces and parentheses): state is [0], the parent [1], start time [19]."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _parent(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def _start_time(pid: int) -> str:
    """When the process started, in clock ticks since boot: with its PID, it
    names one process for as long as the machine runs."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else "0"


def _started_as_rank(pid: int) -> bool:
    """Whether process pid was started with LOCAL_RANK in its environment
    (a rank, or a shell the launcher started for one). False when that
    cannot be read (another user's process)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return any(entry.startswith(b"LOCAL_RANK=") for entry in env.split(b"\0"))
