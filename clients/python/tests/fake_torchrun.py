"""A stand-in for torchrun in the wrapper's tests (test_lifecycle.py): it
records what happens to it, one line each, in FAKE_TORCHRUN_RECORD.

It records its start (pid), and optionally opens a loader session
(FAKE_TORCHRUN_CONFIG: a JSON job config) so that the daemon holds a ring.
It then sleeps FAKE_TORCHRUN_SLEEP seconds (default 120) and exits 5. On
SIGTERM or SIGINT it records the signal and whether the daemon still
serves, waits half a second, records that again, and exits 7.

With FAKE_TORCHRUN_WORKERS=N it also starts N workers, each in a session of
its own as torchrun's are (start_new_session): out of reach of a kill of the
wrapper's session. Each records "worker PID"; worker 1 ignores SIGTERM, as
a rank busy in a collective can seem to. torchrun forwards a signal to them
and, at a normal end, waits for them (they sleep FAKE_TORCHRUN_SLEEP too).
FAKE_TORCHRUN_DETACH=PATH starts one more process in a session of its own
that it does not wait for (a helper a job leaves behind on purpose): it
records "detached PID" and, when it exits, "detached exit" in PATH."""

import json
import os
import signal
import subprocess
import sys
import time
from typing import List

RECORD = os.environ["FAKE_TORCHRUN_RECORD"]


def note(line: str) -> None:
    with open(RECORD, "a") as f:
        f.write(line + "\n")


def daemon_state() -> str:
    p = subprocess.run([os.environ["DATALOADERD_BIN"], "healthcheck", "--socket", os.environ["DATALOADERD_SOCKET"],
                        "--timeout", "5s"], capture_output=True)
    return "up" if p.returncode == 0 else "down"


WORKERS: List["subprocess.Popen[bytes]"] = []


def worker(index: int) -> None:
    if index == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note(f"worker {os.getpid()}")
    time.sleep(float(os.environ.get("FAKE_TORCHRUN_SLEEP", "120")))


def detached(path: str) -> None:
    with open(path, "a") as f:
        f.write(f"detached {os.getpid()}\n")
    time.sleep(3)
    with open(path, "a") as f:
        f.write("detached exit\n")


def start_workers() -> None:
    for i in range(int(os.environ.get("FAKE_TORCHRUN_WORKERS", "0"))):
        WORKERS.append(subprocess.Popen([sys.executable, __file__, "worker", str(i)], start_new_session=True))
    if os.environ.get("FAKE_TORCHRUN_DETACH"):
        subprocess.Popen([sys.executable, __file__, "detached", os.environ["FAKE_TORCHRUN_DETACH"]],
                         start_new_session=True)


def on_signal(signum: int, frame: object) -> None:
    for w in WORKERS:
        w.send_signal(signum)
    note(f"signal {signal.Signals(signum).name} daemon={daemon_state()}")
    time.sleep(0.5)
    note(f"exit 7 daemon={daemon_state()}")
    os._exit(7)


def main() -> None:
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    loader = None
    if os.environ.get("FAKE_TORCHRUN_CONFIG"):
        from dataloaderd import Loader
        with open(os.environ["FAKE_TORCHRUN_CONFIG"]) as f:
            loader = Loader(json.load(f), dp_rank=0, dp_size=1, job="fake")
        next(iter(loader))
    note(f"started {os.getpid()} args={' '.join(sys.argv[1:])}")
    start_workers()
    time.sleep(float(os.environ.get("FAKE_TORCHRUN_SLEEP", "120")))
    for w in WORKERS:
        w.wait()
    note(f"exit 5 daemon={daemon_state()}")
    if loader is not None:
        loader.close()
    sys.exit(5)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(int(sys.argv[2]))
    elif sys.argv[1:2] == ["detached"]:
        detached(sys.argv[2])
    else:
        main()
