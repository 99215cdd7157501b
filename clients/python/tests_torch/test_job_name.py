"""The default job name under the real torchrun: the same for every rank of a
job, another for the next job, including when torchrun's run id is "none"
(a c10d rendezvous without --rdzv-id)."""

import os
import subprocess
import sys
from typing import List, Set, Tuple

from rundaemon import REPO

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")

PRINT_JOB = """
import os
from dataloaderd._job import default_job
print("JOB", os.environ["RANK"], os.environ.get("TORCHELASTIC_RUN_ID", ""), default_job(), flush=True)
"""


def names(tmp_path, rendezvous: List[str]) -> Tuple[Set[str], Set[str]]:
    """The run ids and default job names that the ranks of one 2-rank
    torchrun job printed."""
    script = tmp_path / "print_job.py"
    script.write_text(PRINT_JOB)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python", "src"))
    env.pop("DATALOADERD_JOB", None)
    env.pop("TORCHELASTIC_RUN_ID", None)
    out = subprocess.run([TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", *rendezvous, str(script)],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("JOB ")]
    assert sorted(r[1] for r in rows) == ["0", "1"], out.stdout
    return {r[2] for r in rows}, {r[3] for r in rows}


def test_job_name_under_torchrun_without_a_run_id(tmp_path):
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"]
    run_ids, first = names(tmp_path, rdzv)
    assert run_ids == {"none"}  # what made two jobs collide before
    _, second = names(tmp_path, rdzv)
    assert len(first) == 1 and len(second) == 1, (first, second)
    assert first != second
    assert next(iter(first)).startswith("torchrun-")


def test_job_name_under_torchrun_with_a_run_id(tmp_path):
    run_ids, jobs = names(tmp_path, ["--rdzv-id", "job-42", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"])
    assert run_ids == {"job-42"} and jobs == {"job-42"}
