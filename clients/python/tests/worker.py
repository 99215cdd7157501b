"""One rank process of the end-to-end tests. It iterates `steps` batches (or to
the end), saves, consumes `after` more batches, then exits cleanly or dies by
SIGKILL. What it served up to the save goes to `out` (.npz): the batches after
the save are lost with the run, which rewinds to the checkpoint.

Argument: one JSON object, see run()."""

import json
import os
import signal
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from corpus import data_tokens  # noqa: E402
from dataloaderd import Loader  # noqa: E402


def run(a):
    loader = Loader(a["config"], dp_rank=a["rank"], dp_size=a["size"], socket=a["socket"],
                    resume_from=a.get("resume_from"), job=a["job"])
    it = iter(loader)
    start = loader.step
    kept, steps = [], []
    limit = a.get("steps")  # None: to the end of the run
    while limit is None or len(steps) < limit:
        batch = next(it, None)
        if batch is None:
            break
        kept.append(data_tokens(batch["tokens"]).copy())
        steps.append(batch["step"])
    saved = None
    if a.get("save"):
        loader.save(a["save"])
        saved = loader.step
    tokens = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int32)
    np.savez(a["out"], tokens=tokens, steps=np.array(steps, dtype=np.int64), start=start,
             saved=-1 if saved is None else saved)
    for _ in range(a.get("after", 0)):
        next(it, None)  # consumed, then lost: not in `out`
    if a.get("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    loader.close()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
