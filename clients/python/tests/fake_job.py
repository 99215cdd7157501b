"""A torchrun job in miniature for test_job.py, with no job name given.

``fake_job.py launcher ARGS``: like torchrun's agent, starts two rank
processes with torchrun's environment (TORCHELASTIC_RUN_ID=none,
MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK), one of them through a shell of
its own, waits for them and prints their reports as a JSON list.

``fake_job.py rank ARGS``: one consumer of a two-process group (dp_rank 0,
consumers=2) that reads three batches and holds its session until every
rank of every job in the test has read (a barrier directory), then reports
its job name and a digest of the batches, or the error it got.
ARGS is one JSON object: config, socket, port, barrier, ranks."""

import hashlib
import json
import os
import subprocess
import sys
import time


def launcher(a):
    env = {k: v for k, v in os.environ.items() if k not in ("DATALOADERD_JOB", "TORCHELASTIC_RUN_ID")}
    env.update(TORCHELASTIC_RUN_ID="none", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a["port"]), WORLD_SIZE="2")
    me, arg = os.path.abspath(__file__), json.dumps(a)
    direct = subprocess.Popen([sys.executable, me, "rank", arg], env={**env, "RANK": "0", "LOCAL_RANK": "0"},
                              stdout=subprocess.PIPE, text=True)
    # Not exec'd: the shell stays between the launcher and the rank.
    shelled = subprocess.Popen(["sh", "-c", '"$0" "$1" rank "$2"; exit $?', sys.executable, me, arg],
                               env={**env, "RANK": "1", "LOCAL_RANK": "1"}, stdout=subprocess.PIPE, text=True)
    reports = [json.loads(p.communicate(timeout=120)[0]) for p in (direct, shelled)]
    print(json.dumps(reports))


def rank(a):
    from dataloaderd import Loader
    report = {}
    try:
        with Loader(a["config"], dp_rank=0, dp_size=1, socket=a["socket"], consumers=2) as ld:
            it = iter(ld)
            digest = hashlib.sha256(b"".join(next(it)["tokens"].tobytes() for _ in range(3))).hexdigest()
            report = {"job": ld.job, "digest": digest}
            arrive(a)
    except Exception as e:
        report = {"error": f"{type(e).__name__}: {e}"}
        arrive(a)
    print(json.dumps(report))


def arrive(a):
    open(os.path.join(a["barrier"], str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(a["barrier"])) < a["ranks"] and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    {"launcher": launcher, "rank": rank}[sys.argv[1]](json.loads(sys.argv[2]))
