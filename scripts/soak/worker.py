"""One rank of a soak job: reads its batches to the end of the epoch, logs
each batch's corpus tokens as a JSON line (flushed before the next batch),
and saves the loader's state every `every` steps into <ckpt>/step-<n>.

Argument: one JSON object with config, rank, size, socket, job, log, ckpt,
every and, on a resume, resume_from."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests"))
from corpus import data_tokens  # noqa: E402
from dataloaderd import Loader  # noqa: E402


def main(a):
    with Loader(a["config"], dp_rank=a["rank"], dp_size=a["size"], socket=a["socket"], job=a["job"],
                resume_from=a.get("resume_from"), batch_timeout=60) as loader, open(a["log"], "a") as log:
        for batch in loader:
            step = batch["step"]
            log.write(json.dumps({"step": step, "tokens": data_tokens(batch["tokens"]).tolist()}) + "\n")
            log.flush()
            if step % a["every"] == 0:
                loader.save(os.path.join(a["ckpt"], f"step-{step}"))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
