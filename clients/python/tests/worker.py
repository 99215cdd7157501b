"""One rank process of the end-to-end tests: iterate, save, then exit cleanly
or die by SIGKILL. Arguments: one JSON object (see run())."""

import json
import os
import signal
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from dataloaderd import Loader  # noqa: E402
from corpus import data_tokens  # noqa: E402


def run(a):
    loader = Loader(a["config"], dp_rank=a["rank"], dp_size=a["size"], socket=a["socket"],
                    resume_from=a.get("resume_from"), job=a["job"])
    kept = []
    steps = a.get("steps")  # None: to the end
    it = iter(loader)
    n = 0
    for batch in it:
        kept.append(data_tokens(batch["tokens"]).copy())
        n += 1
        if steps is not None and n >= steps:
            break
    if a.get("save"):
        loader.save(a["save"])
    out = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int32)
    np.save(a["out"], out)
    if a.get("kill"):
        # Batches after the save are consumed and then lost with the process.
        for _ in range(2):
            next(it, None)
        os.kill(os.getpid(), signal.SIGKILL)
    loader.close()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
