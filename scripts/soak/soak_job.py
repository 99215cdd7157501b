"""A job of the soak: one bounded epoch through any number of launches, its
ranks processes (worker.py) that log every batch; and the count of what it
served against the corpus (tokens lost, repeated, foreign)."""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Counts:
    """What a job served, against the tokens of its epoch."""

    served: int = 0  # tokens served, repeats included
    lost: int = 0  # tokens of the epoch never served
    repeated: int = 0  # servings of a token past its first
    foreign: int = 0  # servings of a value that is not a token of the epoch

    def bad(self) -> bool:
        return bool(self.lost or self.repeated or self.foreign)

    def add(self, other: Counts) -> None:
        self.served += other.served
        self.lost += other.lost
        self.repeated += other.repeated
        self.foreign += other.foreign


def count_tokens(served: Iterable[int], epoch: Set[int]) -> Counts:
    """Counts a served log (every token value served, in any order) against
    the epoch's tokens, each of which must be served exactly once."""
    seen: Counter[int] = Counter(served)
    c = Counts(served=sum(seen.values()))
    for token, n in seen.items():
        if token in epoch:
            c.repeated += n - 1
        else:
            c.foreign += n
    c.lost = sum(1 for t in epoch if t not in seen)
    return c


class Job:
    """One bounded epoch of a job through any number of launches; what its
    ranks served, kept up to the checkpoint each resume rewinds to.

    set_weights, when given, has the ranks queue mixture changes for future
    steps (worker.py): {"seed": int, "p": the chance at each step, "names":
    the datasets}."""

    def __init__(self, name: str, work: str, config: Dict[str, Any], tokens: Set[int],
                 set_weights: Optional[Dict[str, Any]] = None):
        self.name, self.work, self.config, self.tokens = name, work, config, tokens
        self.set_weights = set_weights
        self.history: List[Tuple[int, List[int]]] = []  # (step, tokens) of the live timeline
        self.launches = 0
        self.procs: List[subprocess.Popen[bytes]] = []
        self.resume: Optional[str] = None
        self.resumed_at = 0
        self.weight_changes = 0  # set_weights calls the ranks made (each made on every rank: counted once)
        # What a failed round kept in its folder needs to be replayed.
        with open(os.path.join(work, "job.json"), "w") as f:
            json.dump({"config": config, "set_weights": set_weights}, f, indent=1)
        self.world = 0
        self.worlds: List[int] = []  # of each launch
        self.resumed: List[int] = []  # the step each launch after the first resumed after
        self.logs: List[str] = []

    def launch(self, socket: str, world: int) -> None:
        i = self.launches
        self.launches += 1
        self.world = world
        self.worlds.append(world)
        self.logs = [os.path.join(self.work, f"L{i}-rank-{r}.jsonl") for r in range(world)]
        ckpt = os.path.join(self.work, f"ckpt-L{i}")
        for r in range(world):
            arg = {"config": self.config, "rank": r, "size": world, "socket": socket,
                   "job": f"{self.name}-L{i}", "log": self.logs[r], "ckpt": ckpt, "every": 3,
                   "resume_from": self.resume, "set_weights": self.set_weights}
            out = open(os.path.join(self.work, f"L{i}-rank-{r}.out"), "wb")
            self.procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), json.dumps(arg)],
                                               stdout=out, stderr=subprocess.STDOUT))

    def poll(self) -> Optional[bool]:
        """True when every rank finished, False when one failed, None while
        they run."""
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            return False
        return True if all(c == 0 for c in codes) else None

    def outputs(self) -> str:
        """The last lines of what the current launch's ranks printed."""
        out = []
        for path in sorted(glob.glob(os.path.join(self.work, f"L{self.launches - 1}-rank-*.out"))):
            with open(path, errors="replace") as f:
                out.append(f"{os.path.basename(path)}: {f.read()[-1500:]}")
        return "\n".join(out)

    def all_reading(self) -> bool:
        """Whether every rank of the launch has logged a batch (its session
        is open: a restarted daemon is waited for only by open sessions)."""
        return all(os.path.exists(p) and os.path.getsize(p) > 0 for p in self.logs)

    def kill_one(self, rng: random.Random) -> None:
        rng.choice(self.procs).kill()

    def kill_all(self) -> None:
        """Kills the launch's ranks, for a soak that ends failed."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def end_launch(self) -> None:
        """Kills what is left of the launch (as torchrun does when a rank
        dies) and reads what its ranks served."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = []
        for r, path in enumerate(self.logs):
            if not os.path.exists(path):
                continue
            with open(path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue  # the line a kill cut short: a batch past any checkpoint
                    if "set_weights" in rec:
                        self.weight_changes += r == 0
                    else:
                        self.history.append((rec["step"], rec["tokens"]))

    def rewind(self) -> None:
        """Resumes from the last whole checkpoint of the launch that just
        ended, or where that launch resumed from: the history past it is
        dropped, as the training it belonged to.

        Only that launch's folders count. A save in flight when its rank was
        killed is still finished by the daemon, so a folder of an earlier
        launch can become whole after the history past it was dropped; a
        trainer marks its own checkpoints whole (examples/train_gpt.py
        writes `latest`), and would not resume from such a folder either."""
        best = (self.resumed_at, self.resume)
        for folder in glob.glob(os.path.join(self.work, f"ckpt-L{self.launches - 1}", "step-*")):
            files = glob.glob(os.path.join(folder, "dataloader", "rank-*-of-*.json"))
            if not files:
                continue
            world = int(files[0].rsplit("-of-", 1)[1][:-5])
            step = int(folder.rsplit("-", 1)[1])
            if len(files) == world and step > best[0]:
                best = (step, folder)
        self.resumed_at, self.resume = best
        self.resumed.append(self.resumed_at)
        self.history = [(s, t) for s, t in self.history if s <= self.resumed_at]

    def check(self) -> Counts:
        """What the job's timeline served, counted against its epoch."""
        return count_tokens((t for _, toks in self.history for t in toks), self.tokens)
