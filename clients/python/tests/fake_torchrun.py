"""A stand-in for torchrun in the wrapper's tests (test_lifecycle.py): it
records what happens to it, one line each, in FAKE_TORCHRUN_RECORD.

It records its start (pid), and optionally opens a loader session
(FAKE_TORCHRUN_CONFIG: a JSON job config) so that the daemon holds a ring.
It then sleeps FAKE_TORCHRUN_SLEEP seconds (default 120) and exits 5. On
SIGTERM or SIGINT it records the signal and whether the daemon still
serves, waits half a second, records that again, and exits 7."""

import json
import os
import signal
import subprocess
import sys
import time

RECORD = os.environ["FAKE_TORCHRUN_RECORD"]


def note(line: str) -> None:
    with open(RECORD, "a") as f:
        f.write(line + "\n")


def daemon_state() -> str:
    p = subprocess.run([os.environ["DATALOADERD_BIN"], "healthcheck", "--socket", os.environ["DATALOADERD_SOCKET"],
                        "--timeout", "5s"], capture_output=True)
    return "up" if p.returncode == 0 else "down"


def on_signal(signum: int, frame: object) -> None:
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
    time.sleep(float(os.environ.get("FAKE_TORCHRUN_SLEEP", "120")))
    note(f"exit 5 daemon={daemon_state()}")
    if loader is not None:
        loader.close()
    sys.exit(5)


if __name__ == "__main__":
    main()
