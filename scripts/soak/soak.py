"""A fault soak of the real daemon: random schedules of faults while healthy
jobs train, for a bounded time.

Each round runs one job of a bounded epoch over a corpus whose every token
value is unique, on a random world size, its ranks as processes (worker.py)
that log every batch and save their state every few steps. While it runs,
the soak injects faults at random (--faults picks them; default all):

- job faults: kill -9 of the daemon (kill9_daemon: it is restarted, and the
  job resumes from its last whole checkpoint, on another world size); kill
  -9 of the daemon restarted as a supervisor would while the ranks wait
  (restart_daemon: they reopen their sessions with skip_to_step and carry
  on with no relaunch); kill -9 of a rank (kill9_rank: the job's other ranks
  are killed too, as torchrun does, and it resumes the same way);
- the round's mixture: a schedule of weights by step in the job's config
  (schedule), and ranks that queue changes for future steps with
  set_weights, the same call on every rank, saved, killed and resumed across
  (set_weights);
- object storage (s3_*): the round's corpus on a real S3 server (versitygw,
  --s3-server) read through a fault proxy (soak_s3.py) that restarts the
  store while the daemon reads (s3_restart) and throttles it with 503
  SlowDown (s3_throttle); beside it noise jobs whose store lies about a
  .bin's size (s3_size_lie: refused, the daemon lives) or ignores Range
  (s3_ignore_range: an error, never wrong data);
- noisy clients beside the job (soak_noise.py, soak_limits.py): sessions
  that never attach (never_attach), loaders that take a batch and never
  release it (never_release), a corpus file replaced in place while read
  (corpus_truncated: FileChangedError), a resume from a forged rank file
  (forged_state: StateError, at once), another user (uid 65534, when the
  soak runs as root) trying a loader's session by its id (other_user:
  intruder.py), an open that skips past the bound (skip_beyond) or skips
  MaxSkip huge batches (skip_costly): refused quickly, the daemon serving on.

After each round it counts what the job served through its resumes against
its epoch (tokens lost, repeated and foreign: each must be 0), and checks
that the daemon is alive and that once its sessions are gone its open files,
goroutines and shm files are back to what they were when it started, and its
RSS bounded. A round that fails ends the soak (exit 1); the report is
written either way.

    python scripts/soak/soak.py --seconds 600 --report soak.json

make soak runs it for SOAK_SECONDS; make test runs a short one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Set

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python", "tests"))

from soak_daemon import SoakFailure  # noqa: E402
from soak_rounds import ALL_FAULTS, Soak  # noqa: E402


def parse_faults(spec: str) -> Set[str]:
    """--faults: names separated by commas; "all" is every fault, "-name"
    leaves one out (all,-s3_size_lie)."""
    chosen: Set[str] = set()
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        drop = name.startswith("-")
        name = name.lstrip("-")
        names = set(ALL_FAULTS) if name == "all" else {name}
        if not names <= set(ALL_FAULTS):
            raise SystemExit(f"--faults: unknown fault {name!r}; the faults are {', '.join(ALL_FAULTS)}")
        chosen = chosen - names if drop else chosen | names
    return chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    ap.add_argument("--bin", default=os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd")))
    ap.add_argument("--s3-server", default=os.environ.get("DATALOADERD_S3_SERVER") or
                    os.path.join(REPO, ".tools", "versitygw"),
                    help="the versitygw binary of the s3_* faults (default $DATALOADERD_S3_SERVER, else "
                         ".tools/versitygw)")
    ap.add_argument("--faults", default="all",
                    help="faults to inject, by name, comma-separated: all (default), or any of "
                         f"{', '.join(ALL_FAULTS)}; -name leaves one out (all,-s3_size_lie)")
    ap.add_argument("--report", help="write the figures as JSON here (also when the soak fails)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    faults = parse_faults(a.faults)
    seed = a.seed if a.seed is not None else int(time.time())
    work = tempfile.mkdtemp(prefix="dataloaderd-soak-")
    print(f"soak: seed {seed}, {a.seconds:.0f} s, faults {','.join(sorted(faults)) or 'none'}, work in {work}",
          flush=True)
    soak = Soak(a.bin, a.seconds, seed, work, faults, a.s3_server)
    # SIGTERM (a timeout, make interrupted) ends the soak as Ctrl-C does: its
    # daemon, ranks and S3 server are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    failed = ""
    try:
        soak.run()
    except (SoakFailure, RuntimeError, OSError) as e:
        failed = f"{type(e).__name__}: {e}" if not isinstance(e, SoakFailure) else str(e)
        soak.report["failed"] = failed[:4000]
    print(json.dumps(soak.report, indent=1))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(soak.report, f, indent=1)
    if failed:
        print(f"soak FAILED (seed {seed}, work kept in {work}): {failed}", file=sys.stderr)
        sys.exit(1)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

