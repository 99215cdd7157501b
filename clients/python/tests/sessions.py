"""Processes by session, for the tests that kill a wrapper's whole session
as a scheduler or a closed terminal would (tests/ and tests_torch/)."""

from __future__ import annotations

import os
import signal
import time
from typing import Dict, List


def stats() -> Dict[int, List[str]]:
    """Every live process's /proc/PID/stat fields after the command name
    (state, ppid, pgrp, session, ...)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in "ZX":
            out[int(entry)] = fields
    return out


def kill_session(sid: int) -> None:
    """kill -9 of every process in session sid, as a scheduler that kills a
    job's session does (pkill -9 -s SID), until none is left."""
    for _ in range(100):
        members = [pid for pid, fields in stats().items() if int(fields[3]) == sid]
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    raise AssertionError(f"session {sid} still has processes")
