"""The daemon under soak: started, killed and restarted by the soak, and
what it holds (files, goroutines, sessions, shm files, RSS) measured so
that each round can check it is back to where it started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from typing import Any, Dict, Optional, Sequence

from soak_s3 import free_port

ATTACH_WITHIN = "2s"
IDLE_LIMIT = 6.0  # seconds; a noisy loader holds its batch longer than this
# A killed rank's session is kept this long for a new process of it
# (docs/rank-restart.md); the soak relaunches under new job names, so its
# kept sessions expire, and the daemon settles after them.
KEEP_DETACHED = "2s"


class SoakFailure(AssertionError):
    pass


class Daemon:
    """The daemon binary, on a socket and shm directory of the soak's, with
    the extra flags and environment given (the S3 store's, say)."""

    def __init__(self, binary: str, work: str, extra: Sequence[str] = (), env: Optional[Dict[str, str]] = None):
        self.bin, self.work, self.extra = binary, work, list(extra)
        self.env = dict(os.environ, **(env or {}))
        self.socket = os.path.join(work, "d.sock")
        self.shm = os.path.join(work, "shm")
        os.makedirs(self.shm, exist_ok=True)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.starts = 0
        self.kills = 0  # kill9 calls: a noisy client's error while the soak killed the daemon is excused
        self.baseline: Dict[str, Any] = {}

    def start(self) -> None:
        self.port = free_port()
        self.log = open(os.path.join(self.work, f"daemon-{self.starts}.log"), "wb")
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--socket", self.socket, "--shm-dir", self.shm, "--log-level", "warn",
             "--attach-within", ATTACH_WITHIN, "--idle-limit", f"{IDLE_LIMIT}s", "--keep-detached", KEEP_DETACHED,
             "--metrics-addr", f"127.0.0.1:{self.port}", *self.extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        self.starts += 1
        for _ in range(200):
            if self.healthy():
                break
            if self.proc.poll() is not None:
                raise SoakFailure(f"daemon exited at start: {self.logs()}")
            time.sleep(0.05)
        if os.geteuid() == 0:
            # Let another user reach the socket, as members of its group do.
            os.chmod(self.work, 0o711)
            os.chmod(self.socket, 0o666)
        base = self.resources()
        if base["gc_cycles"] == 0:
            # Go starts its GC workers, one per P, at the first collection:
            # goroutines of the runtime that a daemon measured before it
            # has not counted yet.
            base["goroutines"] += base["gomaxprocs"]
        opening = any(not f.endswith(".lock") for f in base["shm_files"])
        if (base["sessions"] > 0 or opening) and self.baseline:
            # Ranks waiting for a restarted daemon reopened their sessions
            # before this look (or were opening one: its ring file is made
            # before it counts as a session): the idle daemon's figures are
            # the last ones, and its shm directory holds its lock file alone.
            base = dict(self.baseline, rss=base["rss"], sessions=0,
                        shm_files=[f for f in base["shm_files"] if f.endswith(".lock")])
        self.baseline = base

    def healthy(self, timeout: str = "1s") -> bool:
        """Whether the daemon answers its health check."""
        return subprocess.run([self.bin, "healthcheck", "--socket", self.socket, "--timeout", timeout],
                              capture_output=True).returncode == 0

    def goroutines(self) -> str:
        """The daemon's goroutine stacks, from SIGQUIT's dump into its log
        (which ends it)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with open(self.log.name, errors="replace") as f:
            text = f.read()
        i = text.find("goroutine ")
        return text[i:i + 6000] if i >= 0 else "(no dump)"

    def logs(self) -> str:
        """The end of the daemon's log; from its first panic or fatal error
        when it has one (the goroutine dump after it says little)."""
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            text = f.read()
        crash = [i for i in (text.find("panic: "), text.find("fatal error: ")) if i >= 0]
        return text[min(crash):min(crash) + 2000] if crash else text[-3000:]

    def crashes_within(self, seconds: float) -> bool:
        """Whether the daemon exits by itself within seconds (a crash takes a
        moment to end the process); False as soon as the soak kills or
        restarts it (what it would have done is then not known)."""
        kills, proc = self.kills, self.proc
        deadline = time.monotonic() + seconds
        while proc is not None and self.kills == kills and self.proc is proc:
            if proc.poll() is not None:
                return self.kills == kills
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.kills += 1
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(timeout=60)
            if code != 0:
                raise SoakFailure(f"daemon exited {code} on SIGTERM: {self.logs()}")

    def metrics(self) -> Dict[str, float]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/metrics", headers={"Connection": "close"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        out: Dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def resources(self) -> Dict[str, Any]:
        assert self.proc is not None
        pid = self.proc.pid
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
        m = self.metrics()
        fds = cached = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue  # closed meanwhile
            # The object cache keeps the objects it read (a memfd each) for
            # later sessions, within its budget: held, not leaked.
            if target.startswith("/memfd:dataloaderd-object"):
                cached += 1
            else:
                fds += 1
        return {"fds": fds, "cached_objects": cached, "goroutines": int(m["go_goroutines"]),
                "gc_cycles": int(m.get("go_gc_duration_seconds_count", 1)),
                "gomaxprocs": int(m.get("go_sched_gomaxprocs_threads", os.cpu_count() or 1)),
                "sessions": int(m["dataloaderd_sessions"]), "rss": rss, "shm_files": sorted(os.listdir(self.shm))}


def settle(d: Daemon, timeout: float) -> Dict[str, Any]:
    """Waits until the daemon holds no session and its resources are back to
    its baseline; returns what it measured last."""
    deadline = time.monotonic() + timeout
    while True:
        now = d.resources()
        base = d.baseline
        back = (now["sessions"] == 0 and now["fds"] <= base["fds"] and now["goroutines"] <= base["goroutines"]
                and now["shm_files"] == base["shm_files"])
        if back:
            return now
        if time.monotonic() > deadline:
            raise SoakFailure(f"daemon not back to its baseline after {timeout:.0f} s: now {now}, at start {base}; "
                              f"its goroutines: {d.goroutines()}")
        time.sleep(0.5)
