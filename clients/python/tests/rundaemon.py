"""The real daemon binary (DATALOADERD_BIN, default bin/dataloaderd) on a
socket in a temp dir, and what the tests check of what it leaves behind;
used by the fixtures of tests/ and tests_torch/."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Sequence, Set, Union

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd"))

SHM = "/dev/shm"


def dataloaderd_maps(pid: Union[int, str]) -> Set[str]:
    """The ring files process pid has mapped (empty when it is gone)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    paths = (line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6)
    return {p for p in paths if os.path.basename(p).startswith("dataloaderd-")}


def dataloaderd_fds(pid: Union[int, str]) -> Set[str]:
    """The dataloaderd- files process pid holds open (a daemon's lock file)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    held = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if os.path.basename(target).startswith("dataloaderd-"):
            held.add(target)
    return held


def rings_of_other_daemons(own_pid: int) -> Set[str]:
    """Ring files mapped, and lock files held open, by dataloaderd processes
    other than own_pid (a daemon someone runs beside these tests must not
    fail them)."""
    held: Set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == own_pid:
            continue
        try:
            if os.path.basename(os.readlink(f"/proc/{entry}/exe")) != "dataloaderd":
                continue
        except OSError:
            continue
        held |= dataloaderd_maps(entry) | dataloaderd_fds(entry)
    return held


class Daemon:
    """`dataloaderd serve` on a socket in a temp dir, rings in /dev/shm."""

    def __init__(self, tmp_path: Path, extra: Sequence[str] = ()):
        self.socket = str(tmp_path / "d.sock")
        self.before = set(self.files())
        self.log_path = tmp_path / "daemon.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--socket", self.socket, "--log-level", "warn", "--attach-within", "5s", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if subprocess.run([BIN, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"daemon did not start: {self.logs()}")

    @staticmethod
    def files() -> List[str]:
        """Every daemon's files in /dev/shm: rings, control files, lock files."""
        return glob.glob(os.path.join(SHM, "dataloaderd-*"))

    @classmethod
    def rings(cls) -> List[str]:
        """The ring and control files in /dev/shm (not the lock file a
        running daemon holds)."""
        return [p for p in cls.files() if not p.endswith(".lock")]

    def logs(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        """SIGTERM; the daemon must exit 0 and leave no socket, and no ring or
        lock file it made."""
        if self.proc.returncode is not None:
            return
        held = dataloaderd_maps(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.log.close()
        assert code == 0, f"daemon exited {code}: {self.logs()[-2000:]}"
        assert not os.path.exists(self.socket), "socket left after SIGTERM"
        made = (held | (set(self.files()) - self.before)) - rings_of_other_daemons(self.proc.pid)
        left = sorted(p for p in made if os.path.exists(p))
        assert left == [], f"ring files left in {SHM} after SIGTERM: {left}"


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP to process pid, returning once every thread of it is stopped.

    kill() only queues the stop: it takes effect when a thread of the
    process next runs in the kernel and starts the group stop. The daemon's
    threads run as SCHED_BATCH, so on a loaded machine that can take many
    milliseconds, while its producer thread goes on serving batches (seen:
    ten batches after the kill, the process still running)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue
        if states and all(s in ("T", "t") for s in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} not stopped {timeout} s after SIGSTOP: thread states {states}")
        time.sleep(0.001)


def free_port() -> int:
    """A TCP port on 127.0.0.1 free a moment ago (for --metrics-addr)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> Dict[str, float]:
    """The daemon's /metrics on port, each sample by its name and labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values
