"""Clients beside a soak job that misbehave, one kind each: sessions opened
and never attached (reclaimed after --attach-within), loaders that take a
batch and hold it (reclaimed after --idle-limit), a corpus file replaced in
place while read, a resume from a forged rank file, another user trying a
session (root only); and those of soak_limits.py: skips past the bound,
costly skips, a store that lies about sizes or ignores Range."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

import grpc
from corpus import make_corpus
from dataloaderd import DataloaderdError, FileChangedError, Loader, StateError
from dataloaderd._proto import dataloader_pb2 as pb
from dataloaderd._proto import dataloader_pb2_grpc as pb_grpc
from dataloaderd.config import to_proto
from soak_daemon import IDLE_LIMIT, Daemon
from soak_s3 import FaultProxy

HERE = os.path.dirname(os.path.abspath(__file__))
OTHER_UID = 65534  # nobody: the intruder of the other_user fault


class Noise(threading.Thread):
    """One misbehaving client of kind `kind` (a name of KINDS), run beside a
    job; what went wrong is in errors. A call that fails because the soak
    killed the daemon meanwhile is excused; a daemon that died by itself is
    not."""

    def __init__(self, kind: str, daemon: Daemon, config: Dict[str, Any], rng: random.Random,
                 faults: Counter[str], tag: str, proxy: Optional[FaultProxy] = None):
        super().__init__(daemon=True)
        self.kind, self.d, self.config, self.rng, self.faults, self.tag = kind, daemon, config, rng, faults, tag
        self.proxy = proxy
        self.job = f"noise-{tag}"
        self.errors: List[str] = []

    def run(self) -> None:
        started, kills = self.d.starts, self.d.kills
        try:
            KINDS[self.kind](self)
            self.faults[self.kind] += 1
        except (DataloaderdError, grpc.RpcError) as e:
            if self.d.kills != kills:
                return  # the soak killed the daemon meanwhile: that ends any client
            died = "" if self.d.alive() and self.d.starts == started else f"; the daemon died: {self.d.logs()}"
            self.errors.append(f"{self.kind}: {e}{died}")
        except Exception as e:  # a defect of the soak itself, told as such
            self.errors.append(f"{self.kind}: the soak's client failed: {type(e).__name__}: {e}")

    def loader(self, config: Dict[str, Any], job: str = "", **kw: Any) -> Loader:
        return Loader(config, socket=self.d.socket, dp_rank=0, dp_size=1, job=job or self.job, **kw)

    def never_attach(self) -> None:
        with grpc.insecure_channel("unix://" + self.d.socket) as ch:
            pb_grpc.LoaderStub(ch).OpenSession(pb.OpenSessionRequest(
                job=self.job, config=to_proto(self.config, "/"), dp_rank=0, dp_size=1), timeout=30)

    def never_release(self) -> None:
        loader = self.loader(self.config)
        next(iter(loader))
        time.sleep(IDLE_LIMIT * 1.5)
        loader.close()

    def corpus_truncated(self) -> None:
        """A loader on a corpus of its own whose .bin is replaced in place
        (as cp does) while it reads: it must get FileChangedError naming it."""
        work = tempfile.mkdtemp(dir=self.d.work)
        datasets, _ = make_corpus(work, seed=self.rng.randrange(1 << 30))
        cfg = dict(self.config, datasets=datasets)
        with self.loader(cfg) as loader:
            it = iter(loader)
            next(it)
            path = datasets[0]["path"] + ".bin"
            with open(path, "wb") as f:
                f.write(b"\x01" * 16)
            try:
                for _ in range(100000):
                    next(it)
            except FileChangedError as e:
                if path not in str(e):
                    self.errors.append(f"corpus_truncated: the error does not name {path}: {e}")
            else:
                self.errors.append("corpus_truncated: no error after the corpus file was cut short")

    def forged_state(self) -> None:
        """A resume from a rank file with one field forged past its shard:
        refused at open with StateError, at once."""
        folder = tempfile.mkdtemp(dir=self.d.work)
        with self.loader(self.config) as loader:
            it = iter(loader)
            for _ in range(3):
                next(it)
            loader.save(folder)
        path = os.path.join(folder, "dataloader", "rank-0-of-1.json")
        with open(path) as f:
            doc = json.load(f)
        field = self.rng.choice(["pos", "offset", "taken", "lines"])
        doc["shards"][0][field][0] = 1 << 50
        with open(path, "w") as f:
            json.dump(doc, f)
        start = time.monotonic()
        try:
            next(iter(self.loader(self.config, job=f"{self.job}-r", resume_from=folder)))
            self.errors.append(f"forged_state: a rank file with {field} = 2^50 was accepted")
        except StateError:
            if time.monotonic() - start > 10:
                self.errors.append("forged_state: the refusal took more than 10 s")

    def other_user(self) -> None:
        """A loader of this user; another user who knows its session id and
        job tries them; the loader then reads on and saves as before. What
        went wrong is raised, so that a daemon killed meanwhile excuses it."""
        folder = tempfile.mkdtemp(dir=self.d.work)
        os.chmod(folder, 0o777)  # where the intruder's SaveState would write, were it let
        wrong = []
        with self.loader(self.config) as loader:
            it = iter(loader)
            first = next(it)
            sid = loader._session.session_id if loader._session is not None else ""
            arg = {"uid": OTHER_UID, "socket": self.d.socket, "session": sid, "job": self.job, "config": self.config,
                   "folder": folder}
            out = subprocess.run([sys.executable, os.path.join(HERE, "intruder.py"), json.dumps(arg)],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise DataloaderdError(f"other_user: the intruder exited {out.returncode}: {out.stderr[-2000:]}")
            got = json.loads(out.stdout)
            wrong += [f"{op} on another user's session: {got[op]}, want SessionNotFoundError"
                      for op in ("GetState", "SaveState", "CloseSession") if got[op] != "SessionNotFoundError"]
            if not got.get("own_session") or got["own_session"] == sid:
                wrong.append(f"the intruder's open of job {self.job} rank 0 got {got}; the victim's session is {sid}")
            if os.listdir(folder):
                wrong.append(f"the intruder's SaveState wrote {os.listdir(folder)}")
            second = next(it)
            if second["step"] != first["step"] + 1:
                wrong.append(f"the victim's next step is {second['step']} after {first['step']}")
            loader.save(os.path.join(folder, "mine"))
        if wrong:
            raise DataloaderdError("other_user: " + "; ".join(wrong))


# The kinds, by name (--faults); soak_limits adds its own.
KINDS: Dict[str, Callable[[Noise], None]] = {
    "never_attach": Noise.never_attach,
    "never_release": Noise.never_release,
    "corpus_truncated": Noise.corpus_truncated,
    "forged_state": Noise.forged_state,
    "other_user": Noise.other_user,
}
