"""Starting and stopping the daemon binary for the scripts in this folder."""
import contextlib
import subprocess
import time
from typing import IO, Any, Iterator, Optional


@contextlib.contextmanager
def running(binary: str, socket: str, *flags: str, log: Optional[IO[Any]] = None) -> Iterator["subprocess.Popen[bytes]"]:
    """Runs `binary serve --socket socket flags...` until the block ends; waits
    for the healthcheck first and raises if the daemon never becomes healthy."""
    proc = subprocess.Popen([binary, "serve", "--socket", socket, *flags], stderr=log)
    try:
        for _ in range(100):
            if subprocess.run([binary, "healthcheck", "--socket", socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {proc.returncode} before serving")
            time.sleep(0.1)
        else:
            raise RuntimeError("the daemon did not become healthy")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
