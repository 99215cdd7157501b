"""A dataloaderd daemon for the benchmark (`dataloaderd serve` on a socket
of its own, metrics on a free port)."""
import contextlib
import os
import socket as socketlib
import subprocess
import time
import urllib.request

from .cpu import cpu_seconds


def free_port():
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """`dataloaderd serve` on a socket of its own, with metrics on a free port."""

    def __init__(self, binary, tmp, name, extra=()):
        self.socket = os.path.join(tmp, f"{name}.sock")
        self.port = free_port()
        self.logf = open(os.path.join(tmp, f"{name}.log"), "w")
        self.binary = binary
        self.proc = subprocess.Popen([binary, "serve", "--socket", self.socket, "--log-level", "warn",
                                      "--metrics-addr", f"127.0.0.1:{self.port}", *extra],
                                     stdout=self.logf, stderr=subprocess.STDOUT)
        for _ in range(300):
            if subprocess.run([binary, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode} before serving")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the daemon did not become healthy")

    def status_kib(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def log_tail(self, n=3000):
        with open(self.logf.name) as f:
            return f.read()[-n:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.logf.close()


@contextlib.contextmanager
def daemon(binary, tmp, name, extra=()):
    d = Daemon(binary, tmp, name, extra)
    try:
        yield d
    finally:
        d.stop()
