"""Runs the real daemon binary (DATALOADERD_BIN, default bin/dataloaderd) on a
socket in a temp dir for each test that asks for it."""

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd"))


class Daemon:
    def __init__(self, tmp_path, extra=()):
        self.socket = str(tmp_path / "d.sock")
        self.shm = str(tmp_path / "shm")
        os.mkdir(self.shm)
        self.log = open(tmp_path / "daemon.log", "w+")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--socket", self.socket, "--shm-dir", self.shm, "--log-level", "info",
             "--attach-within", "5s", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if subprocess.run([BIN, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"daemon did not start: {self.logs()}")

    def rings(self):
        return glob.glob(os.path.join(self.shm, "dataloaderd-*"))

    def logs(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        assert code == 0, f"daemon exited {code}: {self.logs()[-2000:]}"
        assert not os.path.exists(self.socket), "socket left after SIGTERM"
        assert self.rings() == [], f"ring files left after SIGTERM: {self.rings()}"


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def daemon_factory(tmp_path):
    started = []

    def start(*extra):
        sub = tmp_path / f"daemon{len(started)}"
        sub.mkdir()
        d = Daemon(sub, extra)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
