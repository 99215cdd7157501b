"""One rank of a soak job: reads its batches to the end of the epoch, logs
each batch's corpus tokens as a JSON line (flushed before the next batch),
and saves the loader's state every `every` steps into <ckpt>/step-<n>.

With set_weights ({"seed", "p", "names"}), after a batch of step s the rank
queues, with chance p, a mixture change for a later step
(loader.set_weights(weights, step=s+k)) before it saves, as the README's
trainer does: what it calls and when follow from the seed and s alone, so
every rank makes the same call at the same step, and a launch resumed from a
checkpoint does not make again the calls of the steps before it (the change
must come from the saved state). Each call is logged as a line of its own.

Argument: one JSON object with config, rank, size, socket, job, log, ckpt,
every, set_weights and, on a resume, resume_from."""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any, Dict, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests"))
from corpus import data_tokens  # noqa: E402
from dataloaderd import Loader  # noqa: E402


def weight_change(spec: Optional[Dict[str, Any]], step: int) -> Optional[Tuple[int, Dict[str, float]]]:
    """The change to queue after the batch of step, if any: (its step, the
    weights), from the spec's seed and the step alone. Every weight is
    positive, so that a bounded epoch still serves every token."""
    if not spec:
        return None
    rng = random.Random(int(spec["seed"]) * 1_000_003 + step)
    if rng.random() >= float(spec["p"]):
        return None
    return step + rng.randint(1, 12), {name: round(rng.uniform(0.2, 4.0), 3) for name in spec["names"]}


def main(a: Dict[str, Any]) -> None:
    with Loader(a["config"], dp_rank=a["rank"], dp_size=a["size"], socket=a["socket"], job=a["job"],
                resume_from=a.get("resume_from"), batch_timeout=60) as loader, open(a["log"], "a") as log:
        for batch in loader:
            step = batch["step"]
            log.write(json.dumps({"step": step, "tokens": data_tokens(batch["tokens"]).tolist()}) + "\n")
            log.flush()
            change = weight_change(a.get("set_weights"), step)
            if change is not None:
                loader.set_weights(change[1], step=change[0])
                log.write(json.dumps({"set_weights": change[0], "at": step}) + "\n")
                log.flush()
            if step % a["every"] == 0:
                loader.save(os.path.join(a["ckpt"], f"step-{step}"))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
