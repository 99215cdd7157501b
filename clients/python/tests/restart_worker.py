"""One rank process of test_rank_restart.py: a plain Loader(config) that reads
its rank's batches to the end, each a "training step" of `pause` seconds.
Each batch is appended to `out` as it arrives (step, token count, the
corpus tokens), flushed, so a kill -9 loses nothing it took; `meta` gets one
JSON line at the first batch: its step, whether the loader continued a
session a dead process left, when the batch came and when the Loader was
made, after the imports (time.time()).

Argument: one JSON object, see run()."""

import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from corpus import data_tokens  # noqa: E402
from dataloaderd import Loader  # noqa: E402


def run(a):
    opened = time.time()  # after the imports
    loader = Loader(a["config"], dp_rank=a["rank"], dp_size=a["size"], socket=a["socket"], job=a["job"],
                    transport=a["transport"], consumers=a["consumers"], copy=a.get("copy", False))
    with open(a["out"], "ab") as out:
        for i, batch in enumerate(loader):
            if i == 0:
                with open(a["meta"], "a") as meta:
                    meta.write(json.dumps({"pid": os.getpid(), "step": batch["step"], "continued": loader.continued,
                                           "t_first": time.time(), "t_loader": opened}) + "\n")
            tokens = data_tokens(batch["tokens"]).astype("<i4")
            out.write(struct.pack("<QI", batch["step"], tokens.size) + tokens.tobytes())
            out.flush()
            time.sleep(a["pause"])
    loader.close()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
