"""The daemon's lifecycle next to torchrun: the real wrapper script
(deploy/torchrun-with-dataloaderd.sh) with a fake torchrun on PATH
(fake_torchrun.py), what a killed daemon leaves and the next one sweeps,
and what a healthy job's ends count and log."""

from __future__ import annotations

import json
import os
import signal
import socket as socketlib
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from conftest import BIN, REPO, Daemon
from sessions import kill_session, stats

from dataloaderd import Loader

WRAPPER = os.path.join(REPO, "deploy", "torchrun-with-dataloaderd.sh")
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gone(pid: int) -> bool:
    """Whether process pid has exited (a zombie nobody reaped counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_until(what: str, cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)


def children(pid: int, name: str) -> List[int]:
    """The live child processes of pid whose command is name."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm == name and int(rest[1]) == pid and rest[0] != "Z":
            out.append(int(entry))
    return out


def cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def with_env(entry: str) -> List[int]:
    """The live processes whose environment holds entry (NAME=value)."""
    found = []
    for pid in stats():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if entry.encode() in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def files(d: Path) -> List[str]:
    return sorted(n for n in os.listdir(d) if n.startswith("dataloaderd-"))


class Wrapped:
    """The wrapper running a fake torchrun, in a session of its own (as under
    a job scheduler); its daemon's rings go to shm."""

    def __init__(self, tmp: Path, extra_env: Optional[Dict[str, str]] = None, args: str = "", path: str = "",
                 socket_dir: Optional[Path] = None):
        """socket_dir: no DATALOADERD_SOCKET, but XDG_RUNTIME_DIR, so that the
        wrapper takes its default socket there, named by its PID."""
        self.tmp, self.record = tmp, tmp / "record"
        self.socket, self.shm = str(tmp / "d.sock"), tmp / "shm"
        self.shm.mkdir()
        bindir = tmp / "bin"
        bindir.mkdir()
        fake = bindir / "torchrun"
        fake.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE}/fake_torchrun.py \"$@\"\n")
        fake.chmod(0o755)
        env = {**os.environ, "PATH": f"{path}{bindir}:{os.environ['PATH']}", "DATALOADERD_BIN": BIN,
               "FAKE_TORCHRUN_RECORD": str(self.record),
               "DATALOADERD_ARGS": f"--shm-dir {self.shm} --log-level warn {args}", **(extra_env or {})}
        if socket_dir is None:
            env["DATALOADERD_SOCKET"] = self.socket
        else:
            env.pop("DATALOADERD_SOCKET", None)
            env["XDG_RUNTIME_DIR"] = str(socket_dir)
        self.stderr = open(tmp / "wrapper.err", "w")
        # SIGINT at its default, as a terminal starts the wrapper: a make
        # run in the background without job control ignores it, a bash
        # started so cannot trap it, and the Ctrl-C tests would time out.
        self.proc = subprocess.Popen([WRAPPER, "--nproc-per-node", "2", "train.py"], env=env,
                                     stdout=self.stderr, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        if socket_dir is not None:
            self.socket = str(socket_dir / f"dataloaderd-{self.proc.pid}.sock")
        wait_until("the fake torchrun started", lambda: self.lines()[:1] != [] or self.proc.poll() is not None)
        assert self.proc.poll() is None, self.log()
        self.torchrun = int(self.lines()[0].split()[1])
        daemons = [p for p in children(self.proc.pid, "dataloaderd") if cmdline(p)[1:2] == ["serve"]]
        assert len(daemons) == 1, (daemons, self.log())
        self.daemon = daemons[0]

    def workers(self, n: int) -> List[int]:
        """The fake torchrun's n workers, once all have started."""
        wait_until(f"{n} workers started", lambda: len([x for x in self.lines() if x.startswith("worker ")]) == n)
        return [int(x.split()[1]) for x in self.lines() if x.startswith("worker ")]

    def processes(self) -> List[int]:
        """Every live process started from this wrapper (they carry its record path)."""
        return with_env(f"FAKE_TORCHRUN_RECORD={self.record}")

    def lines(self) -> List[str]:
        return self.record.read_text().splitlines() if self.record.exists() else []

    def log(self) -> str:
        if not self.stderr.closed:
            self.stderr.flush()
        return (self.tmp / "wrapper.err").read_text()[-3000:]

    def wait(self) -> int:
        code = self.proc.wait(timeout=60)
        self.stderr.close()
        return code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_wrapper_signals_torchrun_first_and_exits_with_its_code(tmp_path, sig):
    w = Wrapped(tmp_path)
    w.proc.send_signal(sig)
    assert w.wait() == 7, w.log()
    # torchrun got the signal while the daemon served, and the daemon still
    # served when torchrun exited: it is stopped only after.
    assert w.lines()[1:] == [f"signal {sig.name} daemon=up", "exit 7 daemon=up"], w.lines()
    assert gone(w.daemon) and gone(w.torchrun)
    assert not os.path.exists(w.socket), "socket left"
    assert files(w.shm) == []


def test_wrapper_ctrl_c_reaches_torchrun_once_and_the_daemon_after(tmp_path):
    # A terminal's Ctrl-C signals its whole foreground process group: the
    # wrapper's. The daemon and torchrun have groups of their own, so only
    # the wrapper's forwarded SIGINT reaches torchrun, and none the daemon.
    w = Wrapped(tmp_path)
    os.killpg(w.proc.pid, signal.SIGINT)
    assert w.wait() == 7, w.log()
    assert w.lines()[1:] == ["signal SIGINT daemon=up", "exit 7 daemon=up"], w.lines()
    assert gone(w.daemon) and not os.path.exists(w.socket)


def test_wrapper_exits_with_torchruns_code_when_it_ends(tmp_path):
    w = Wrapped(tmp_path, {"FAKE_TORCHRUN_SLEEP": "0.5"})
    assert w.wait() == 5, w.log()
    assert w.lines()[1:] == ["exit 5 daemon=up"], w.lines()
    assert gone(w.daemon) and not os.path.exists(w.socket)


def test_wrapper_without_pdeathsig_still_forwards(tmp_path):
    # A setpriv without --pdeathsig (util-linux before 2.33): torchrun runs
    # unguarded, with a warning, and signals still go to it first.
    fakes = tmp_path / "old"
    fakes.mkdir()
    (fakes / "setpriv").write_text("#!/bin/sh\necho 'Usage: setpriv [options] <program>'\n")
    (fakes / "setpriv").chmod(0o755)
    w = Wrapped(tmp_path, path=f"{fakes}:")
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait() == 7, w.log()
    assert w.lines()[1:] == ["signal SIGTERM daemon=up", "exit 7 daemon=up"], w.lines()
    assert "torchrun would outlive a SIGKILL" in w.log()


def test_wrapper_killed_leaves_nothing(tmp_path, config):
    port = free_port()
    (tmp_path / "config.json").write_text(json.dumps(config))
    w = Wrapped(tmp_path, {"FAKE_TORCHRUN_CONFIG": str(tmp_path / "config.json")},
                args=f"--metrics-addr 127.0.0.1:{port}")
    assert len(files(w.shm)) == 2, files(w.shm)  # the daemon's lock file, the fake's ring
    w.proc.kill()
    assert w.wait() == -signal.SIGKILL
    # The kernel tells both (--exit-with-parent, setpriv --pdeathsig); the
    # daemon stops as on SIGTERM.
    wait_until("the daemon exited", lambda: gone(w.daemon))
    wait_until("torchrun exited", lambda: gone(w.torchrun))
    assert w.lines()[1].startswith("signal SIGTERM"), w.lines()
    assert not os.path.exists(w.socket), "socket left"
    assert files(w.shm) == [], "ring or lock file left"
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", port))  # the metrics port is free


# The lifeline (dataloaderd watch): the fake torchrun's workers have
# sessions of their own, as torchrun's do, and worker 1 ignores SIGTERM.
JOB = {"FAKE_TORCHRUN_WORKERS": "2", "DATALOADERD_KILL_GRACE": "1s"}


def assert_job_gone(w: Wrapped, workers: List[int]) -> None:
    wait_until("every process of the job exited", lambda: w.processes() == [], timeout=5)
    assert all(gone(pid) for pid in [*workers, w.torchrun, w.daemon])
    wait_until("the socket removed", lambda: not os.path.exists(w.socket), timeout=2)


def test_wrapper_session_killed_takes_its_ranks_and_socket(tmp_path):
    # kill -9 of every process in the wrapper's session (torchrun and the
    # daemon too, so neither can stop anything): the workers, in sessions of
    # their own, are stopped by the watcher, which also removes the socket
    # the SIGKILLed daemon left.
    w = Wrapped(tmp_path, JOB)
    workers = w.workers(2)
    kill_session(w.proc.pid)
    assert w.wait() == -signal.SIGKILL
    assert_job_gone(w, workers)
    assert "is gone; stopped" in w.log(), w.log()


@pytest.mark.parametrize("setpriv", [True, False], ids=["setpriv", "no-setpriv"])
def test_wrapper_killed_alone_takes_its_ranks_and_socket(tmp_path, setpriv):
    # kill -9 of the wrapper alone: with setpriv torchrun gets SIGTERM from
    # the kernel and passes it on, but worker 1 ignores it; without setpriv
    # torchrun is not told at all. The watcher stops them either way.
    path = ""
    if not setpriv:
        (tmp_path / "old").mkdir()
        (tmp_path / "old" / "setpriv").write_text("#!/bin/sh\necho 'Usage: setpriv [options] <program>'\n")
        (tmp_path / "old" / "setpriv").chmod(0o755)
        path = f"{tmp_path / 'old'}:"
    w = Wrapped(tmp_path, JOB, path=path)
    workers = w.workers(2)
    w.proc.kill()
    assert w.wait() == -signal.SIGKILL
    assert_job_gone(w, workers)


def test_wrapper_normal_end_kills_nothing(tmp_path):
    # A job that ends by itself: the wrapper stops the watcher, which stops
    # nothing; a process the job left behind on purpose runs to its end.
    detached = tmp_path / "detached"
    w = Wrapped(tmp_path, {**JOB, "FAKE_TORCHRUN_SLEEP": "0.5", "FAKE_TORCHRUN_DETACH": str(detached)})
    assert w.wait() == 5, w.log()
    assert w.lines()[-1] == "exit 5 daemon=up", w.lines()
    leftover = int(detached.read_text().split()[1])
    assert w.processes() == [leftover], "a process of the job outlived the wrapper's normal end"
    wait_until("the detached process ended by itself", lambda: "detached exit" in detached.read_text(), timeout=10)
    assert "stopped" not in w.log(), w.log()


def test_wrapper_removes_sockets_of_gone_wrappers_only(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    dead = []
    for _ in range(2):
        p = subprocess.Popen(["true"])
        p.wait()
        dead.append(p.pid)
    stale, live, alive_pid = (str(run / f"dataloaderd-{pid}.sock") for pid in (dead[0], dead[1], os.getpid()))
    for path in (stale, alive_pid):  # bound, then closed: nothing answers
        with socketlib.socket(socketlib.AF_UNIX) as s:
            s.bind(path)
    listening = socketlib.socket(socketlib.AF_UNIX)
    listening.bind(live)  # a live daemon's, named by a PID now free
    listening.listen()
    try:
        w = Wrapped(tmp_path, {"FAKE_TORCHRUN_SLEEP": "0.5"}, socket_dir=run)
        assert w.socket == str(run / f"dataloaderd-{w.proc.pid}.sock") and os.path.exists(w.socket)
        assert not os.path.exists(stale), "the socket of a gone wrapper was left"
        assert os.path.exists(live), "a live daemon's socket was removed"
        assert os.path.exists(alive_pid), "the socket named by a live PID was removed"
        assert w.wait() == 5, w.log()
        assert sorted(os.listdir(run)) == sorted(os.path.basename(p) for p in (live, alive_pid))
    finally:
        listening.close()


def test_new_daemon_sweeps_what_a_killed_one_left(tmp_path, config):
    shm = tmp_path / "shm"
    shm.mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Daemon(tmp_path / "a", ["--shm-dir", str(shm)])
    b = Daemon(tmp_path / "b", ["--shm-dir", str(shm)])
    try:
        with Loader(config, dp_rank=0, dp_size=1, socket=a.socket, job="a") as la, \
                Loader(config, dp_rank=0, dp_size=1, socket=b.socket, job="b", transport="shm") as lb:
            ita, itb = iter(la), iter(lb)
            next(ita), next(itb)
            # dataloaderd-<instance>-<session>, dataloaderd-<instance>.lock
            a_files, b_files = (set(n for n in files(shm) if n.startswith(os.path.basename(ld.ring_path or "")[:28]))
                                for ld in (la, lb))
            assert len(a_files) == 2 and len(b_files) == 2, files(shm)
            b.proc.kill()
            b.proc.wait()
            assert set(files(shm)) == a_files | b_files
            assert os.path.exists(b.socket), "the killed daemon's socket"
            # A new daemon on the killed one's socket (stale: nothing answers)
            # and the shared shm directory.
            c = Daemon(tmp_path / "b", ["--shm-dir", str(shm)])
            try:
                left = set(files(shm))
                assert not left & b_files, f"the killed daemon's files were not swept: {left & b_files}"
                assert a_files <= left, f"a live daemon's files were swept: {a_files - left}"
                assert next(ita)["step"] == 2  # the live daemon serves on
                with Loader(config, dp_rank=0, dp_size=1, socket=c.socket, job="c") as lc:
                    assert next(iter(lc))["step"] == 1
            finally:
                c.stop()
    finally:
        a.stop()
        b.stop()
    assert files(shm) == []


def test_healthy_ends_count_and_log_no_error(tmp_path, config):
    port = free_port()
    (tmp_path / "d").mkdir()
    d = Daemon(tmp_path / "d", ["--metrics-addr", f"127.0.0.1:{port}", "--log-level", "info"])
    try:
        bounded = {**config, "epochs": 1}
        for fast in (True, False):
            with Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job=f"mid{fast}", fast=fast) as ld:
                it = iter(ld)
                next(it), next(it)
            with Loader(bounded, dp_rank=0, dp_size=1, socket=d.socket, job=f"end{fast}", fast=fast) as ld:
                assert sum(1 for _ in ld) > 2
        live = Loader(config, dp_rank=0, dp_size=1, socket=d.socket, job="live")
        next(iter(live))
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        d.stop()  # with a session open: the stop ends its stream
    live.close()
    assert "dataloaderd_errors_total{" not in text, [x for x in text.splitlines() if "errors_total" in x]
    logs = d.logs()
    assert "context canceled" not in logs, logs
    assert '"level":"error"' not in logs, logs
    assert '"msg":"stopped"' in logs
