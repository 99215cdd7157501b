"""A fault soak of the real daemon: random schedules of faults while healthy
jobs train, for a bounded time.

Each round runs one job of a bounded epoch over a corpus whose every token
value is unique, on a random world size, its ranks as processes (worker.py)
that log every batch and save their state every few steps. While it runs,
the soak injects faults at random: kill -9 of the daemon (it is restarted,
and the job resumes from its last whole checkpoint, on another world size),
kill -9 of the daemon restarted as a supervisor would while the ranks wait
(they reopen their sessions and carry on with no relaunch),
kill -9 of a rank (the job's other ranks are killed too, as torchrun does,
and it resumes the same way), and noisy clients beside the job: sessions
that never attach, loaders that take a batch and never release it, a
loader whose corpus file is replaced in place while it reads (it must get
FileChangedError), a resume from a forged rank file (StateError, at once),
and, when the soak runs as root, another user (uid 65534) who tries a
loader's session by its id and opens its job and rank (intruder.py: every
call on the session is NotFound, the job and rank are its own, and the
victim reads on undisturbed). After
each round it checks that the job got every token of the epoch exactly once
through its resumes, that the daemon is alive, and that once its sessions
are gone its open files, goroutines and shm files are back to what they
were when it started, and its RSS bounded.

    python scripts/soak/soak.py --seconds 600 --report soak.json

make soak runs it for SOAK_SECONDS; make test runs a short one.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from typing import Any, Dict, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python", "tests"))
from corpus import make_corpus  # noqa: E402

import grpc  # noqa: E402
from dataloaderd import DataloaderdError, FileChangedError, Loader, StateError  # noqa: E402
from dataloaderd._proto import dataloader_pb2 as pb  # noqa: E402
from dataloaderd._proto import dataloader_pb2_grpc as pb_grpc  # noqa: E402
from dataloaderd.config import to_proto  # noqa: E402

ATTACH_WITHIN = "2s"
OTHER_UID = 65534  # nobody: the intruder of the other_user fault
IDLE_LIMIT = 6.0  # seconds; a noisy loader holds its batch longer than this


class SoakFailure(AssertionError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """The daemon binary, on a socket and shm directory of the soak's."""

    def __init__(self, binary: str, work: str):
        self.bin, self.work = binary, work
        self.socket = os.path.join(work, "d.sock")
        self.shm = os.path.join(work, "shm")
        os.makedirs(self.shm, exist_ok=True)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.starts = 0

    def start(self) -> None:
        self.port = free_port()
        self.log = open(os.path.join(self.work, f"daemon-{self.starts}.log"), "wb")
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--socket", self.socket, "--shm-dir", self.shm, "--log-level", "warn",
             "--attach-within", ATTACH_WITHIN, "--idle-limit", f"{IDLE_LIMIT}s",
             "--metrics-addr", f"127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        self.starts += 1
        for _ in range(200):
            if subprocess.run([self.bin, "healthcheck", "--socket", self.socket, "--timeout", "1s"],
                              capture_output=True).returncode == 0:
                break
            if self.proc.poll() is not None:
                raise SoakFailure(f"daemon exited at start: {self.logs()}")
            time.sleep(0.05)
        if os.geteuid() == 0:
            # Let another user reach the socket, as members of its group do.
            os.chmod(self.work, 0o711)
            os.chmod(self.socket, 0o666)
        base = self.resources()
        if base["sessions"] > 0 and getattr(self, "baseline", None):
            # Ranks waiting for a restarted daemon reopened their sessions
            # before this look: the idle daemon's figures are the last ones,
            # and its shm directory holds its lock file alone.
            base = dict(self.baseline, rss=base["rss"], sessions=0,
                        shm_files=[f for f in base["shm_files"] if f.endswith(".lock")])
        self.baseline = base

    def goroutines(self) -> str:
        """The daemon's goroutine stacks (debug=1 summary from /debug/pprof
        when served; else SIGQUIT's dump into its log, which ends it)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with open(self.log.name, errors="replace") as f:
            text = f.read()
        i = text.find("goroutine ")
        return text[i:i + 6000] if i >= 0 else "(no dump)"

    def logs(self) -> str:
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()[-3000:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(timeout=60)
            if code != 0:
                raise SoakFailure(f"daemon exited {code} on SIGTERM: {self.logs()}")

    def metrics(self) -> Dict[str, float]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/metrics", headers={"Connection": "close"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        out: Dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def resources(self) -> Dict[str, Any]:
        assert self.proc is not None
        pid = self.proc.pid
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
        m = self.metrics()
        return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "goroutines": int(m["go_goroutines"]),
                "sessions": int(m["dataloaderd_sessions"]), "rss": rss,
                "shm_files": sorted(os.listdir(self.shm))}


class Job:
    """One bounded epoch of a job through any number of launches; what its
    ranks served, kept up to the checkpoint each resume rewinds to."""

    def __init__(self, name: str, work: str, config: Dict[str, Any], tokens: Set[int]):
        self.name, self.work, self.config, self.tokens = name, work, config, tokens
        self.history: List[Tuple[int, List[int]]] = []  # (step, tokens) of the live timeline
        self.launches = 0
        self.procs: List[subprocess.Popen[bytes]] = []
        self.resume: Optional[str] = None
        self.resumed_at = 0

    def launch(self, daemon: Daemon, world: int) -> None:
        i = self.launches
        self.launches += 1
        self.world = world
        self.logs = [os.path.join(self.work, f"L{i}-rank-{r}.jsonl") for r in range(world)]
        self.ckpt = os.path.join(self.work, f"ckpt-L{i}")
        for r in range(world):
            arg = {"config": self.config, "rank": r, "size": world, "socket": daemon.socket,
                   "job": f"{self.name}-L{i}", "log": self.logs[r], "ckpt": self.ckpt, "every": 3,
                   "resume_from": self.resume}
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

    def end_launch(self) -> None:
        """Kills what is left of the launch (as torchrun does when a rank
        dies) and reads what its ranks served."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = []
        for path in self.logs:
            if not os.path.exists(path):
                continue
            with open(path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue  # the line a kill cut short: a batch past any checkpoint
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
        self.history = [(s, t) for s, t in self.history if s <= self.resumed_at]

    def check(self) -> int:
        served = [t for _, toks in self.history for t in toks]
        counts = Counter(served)
        twice = [t for t, n in counts.items() if n > 1]
        missing = self.tokens - set(counts)
        extra = set(counts) - self.tokens
        if twice or missing or extra:
            raise SoakFailure(f"job {self.name}: {len(twice)} tokens served twice, {len(missing)} never, "
                              f"{len(extra)} not in the corpus (launches {self.launches})")
        return len(served)


class Noise(threading.Thread):
    """Clients beside the job that misbehave: sessions opened and never
    attached (reclaimed after --attach-within), loaders that take a batch
    and hold it (reclaimed after --idle-limit)."""

    def __init__(self, daemon: Daemon, config: Dict[str, Any], rng: random.Random, faults: Counter[str], tag: str):
        super().__init__(daemon=True)
        self.d, self.config, self.rng, self.faults, self.tag = daemon, config, rng, faults, tag
        self.errors: List[str] = []

    def run(self) -> None:
        kinds = ["never_attach", "never_release", "corpus_truncated", "forged_state"]
        kind = self.rng.choice(kinds + ["other_user"] if os.geteuid() == 0 else kinds)
        started = self.d.starts
        try:
            if kind == "corpus_truncated":
                self.truncated_corpus()
            elif kind == "forged_state":
                self.forged_state()
            elif kind == "other_user":
                self.other_user()
            elif kind == "never_attach":
                with grpc.insecure_channel("unix://" + self.d.socket) as ch:
                    pb_grpc.LoaderStub(ch).OpenSession(pb.OpenSessionRequest(
                        job=f"noise-{self.tag}", config=to_proto(self.config, "/"), dp_rank=0, dp_size=1), timeout=30)
            else:
                loader = Loader(self.config, socket=self.d.socket, dp_rank=0, dp_size=1, job=f"noise-{self.tag}")
                next(iter(loader))
                time.sleep(IDLE_LIMIT * 1.5)
                loader.close()
            self.faults[kind] += 1
        except (DataloaderdError, grpc.RpcError) as e:
            if self.d.starts == started and self.d.alive():  # a daemon killed meanwhile ends it too
                self.errors.append(f"{kind}: {e}")


    def truncated_corpus(self) -> None:
        """A loader on a corpus of its own whose .bin is replaced in place
        (as cp does) while it reads: it must get FileChangedError naming it."""
        work = tempfile.mkdtemp(dir=self.d.work)
        datasets, _ = make_corpus(work, seed=self.rng.randrange(1 << 30))
        cfg = dict(self.config, datasets=datasets)
        with Loader(cfg, socket=self.d.socket, dp_rank=0, dp_size=1, job=f"noise-{self.tag}") as loader:
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
        with Loader(self.config, socket=self.d.socket, dp_rank=0, dp_size=1, job=f"noise-{self.tag}") as loader:
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
            next(iter(Loader(self.config, socket=self.d.socket, dp_rank=0, dp_size=1, job=f"noise-{self.tag}-r",
                             resume_from=folder)))
            self.errors.append(f"forged_state: a rank file with {field} = 2^50 was accepted")
        except StateError:
            if time.monotonic() - start > 10:
                self.errors.append("forged_state: the refusal took more than 10 s")


    def other_user(self) -> None:
        """A loader of this user; another user who knows its session id and
        job tries them; the loader then reads on and saves as before. What
        went wrong is raised, so that a daemon killed meanwhile excuses it."""
        job = f"noise-{self.tag}"
        folder = tempfile.mkdtemp(dir=self.d.work)
        os.chmod(folder, 0o777)  # where the intruder's SaveState would write, were it let
        wrong = []
        with Loader(self.config, socket=self.d.socket, dp_rank=0, dp_size=1, job=job) as loader:
            it = iter(loader)
            first = next(it)
            sid = loader._session.session_id if loader._session is not None else ""
            arg = {"uid": OTHER_UID, "socket": self.d.socket, "session": sid, "job": job, "config": self.config,
                   "folder": folder}
            out = subprocess.run([sys.executable, os.path.join(HERE, "intruder.py"), json.dumps(arg)],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise DataloaderdError(f"other_user: the intruder exited {out.returncode}: {out.stderr[-2000:]}")
            got = json.loads(out.stdout)
            wrong += [f"{op} on another user's session: {got[op]}, want SessionNotFoundError"
                      for op in ("GetState", "SaveState", "CloseSession") if got[op] != "SessionNotFoundError"]
            if not got.get("own_session") or got["own_session"] == sid:
                wrong.append(f"the intruder's open of job {job} rank 0 got {got}; the victim's session is {sid}")
            if os.listdir(folder):
                wrong.append(f"the intruder's SaveState wrote {os.listdir(folder)}")
            second = next(it)
            if second["step"] != first["step"] + 1:
                wrong.append(f"the victim's next step is {second['step']} after {first['step']}")
            loader.save(os.path.join(folder, "mine"))
        if wrong:
            raise DataloaderdError("other_user: " + "; ".join(wrong))


def settle(d: Daemon, timeout: float) -> Dict[str, Any]:
    """Waits until the daemon holds no session and its resources are back to
    its baseline; returns what it measured last."""
    deadline = time.monotonic() + timeout
    while True:
        now = d.resources()
        base = d.baseline
        back = (now["sessions"] == 0 and now["fds"] <= base["fds"] and now["goroutines"] <= base["goroutines"]
                and now["shm_files"] == base["shm_files"])
        if back:
            return now
        if time.monotonic() > deadline:
            raise SoakFailure(f"daemon not back to its baseline after {timeout:.0f} s: now {now}, at start {base}; "
                              f"its goroutines: {d.goroutines()}")
        time.sleep(0.5)


def soak(binary: str, seconds: float, seed: int, work: str) -> Dict[str, Any]:
    rng = random.Random(seed)
    d = Daemon(binary, work)
    d.start()
    faults: Counter[str] = Counter()
    rounds = tokens = temps_left = 0
    max_rss = 0
    deadline = time.monotonic() + seconds
    try:
        while rounds == 0 or time.monotonic() < deadline:
            rounds += 1
            jdir = os.path.join(work, f"round-{rounds}")
            os.makedirs(jdir)
            datasets, ranges = make_corpus(jdir, seed=rng.randrange(1 << 30), sizes=((2000, 60), (1500, 40)))
            config = {"seq_len": 31, "batch_size": 2, "seed": rng.randrange(1000), "logical_shards": 6, "eos_id": 0,
                      "epochs": 1, "datasets": datasets}
            job = Job(f"soak{rounds}", jdir, config, {t for lo, hi in ranges for t in range(lo, hi)})
            noise = [Noise(d, dict(config, epochs=0), rng, faults, f"{rounds}-{i}") for i in range(rng.randrange(3))]
            for n in noise:
                n.start()
            budget = 3  # faults this round, so that it ends
            job.launch(d, rng.choice([1, 2, 3]))
            while True:
                until = time.monotonic() + rng.uniform(0.1, 1.0)
                state = job.poll()
                while state is None and time.monotonic() < until:
                    time.sleep(0.02)
                    state = job.poll()
                if state is True:
                    break
                if state is False:
                    raise SoakFailure(f"a rank of {job.name} failed with no fault injected: {job.outputs()}")
                fault = rng.choice(["none", "kill9_daemon", "kill9_rank", "restart_daemon"]) if budget else "none"
                if fault == "none":
                    continue
                if fault == "restart_daemon" and not job.all_reading():
                    continue  # a rank that has not opened its session yet fails at once, by design
                if fault == "restart_daemon":
                    # As a supervisor restarts it: the ranks wait, reopen
                    # their sessions and carry on, exactly, without a relaunch.
                    d.kill9()
                    time.sleep(rng.uniform(0.05, 1.0))
                    d.start()
                    faults[fault] += 1
                    budget -= 1
                    continue
                if fault == "kill9_daemon":
                    d.kill9()
                else:
                    job.kill_one(rng)
                faults[fault] += 1
                budget -= 1
                job.end_launch()
                if not d.alive():
                    d.start()
                job.rewind()
                job.launch(d, rng.choice([1, 2, 3]))
            job.end_launch()
            tokens += job.check()
            for n in noise:
                n.join(timeout=120)
                if n.errors:
                    raise SoakFailure(f"noisy client failed oddly: {n.errors}")
            if not d.alive():
                raise SoakFailure(f"the daemon died unasked: {d.logs()}")
            res = settle(d, timeout=30 + 2 * IDLE_LIMIT)
            max_rss = max(max_rss, res["rss"])
            if res["rss"] > max(2 * d.baseline["rss"], d.baseline["rss"] + (256 << 20)):
                raise SoakFailure(f"daemon RSS {res['rss'] >> 20} MiB, {d.baseline['rss'] >> 20} MiB at start")
            # Saves killed with their daemon or rank: the temp files they left
            # (a save names its file only once written: expected none).
            temps_left += len(glob.glob(os.path.join(jdir, "ckpt-L*", "step-*", "dataloader", ".rank-*.tmp*")))
            shutil.rmtree(jdir)
            faults["resumes"] += job.launches - 1
        d.stop()
    except BaseException:
        if d.alive():
            d.kill9()
        raise
    return {"seconds": seconds, "seed": seed, "rounds": rounds, "faults": dict(faults), "tokens_checked": tokens,
            "tokens_lost": 0, "tokens_repeated": 0, "daemon_starts": d.starts, "max_rss_mib": max_rss >> 20,
            "save_temps_left": temps_left}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    ap.add_argument("--bin", default=os.environ.get("DATALOADERD_BIN", os.path.join(REPO, "bin", "dataloaderd")))
    ap.add_argument("--report", help="write the figures as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time())
    work = tempfile.mkdtemp(prefix="dataloaderd-soak-")
    print(f"soak: seed {seed}, {a.seconds:.0f} s, work in {work}", flush=True)
    try:
        report = soak(a.bin, a.seconds, seed, work)
    except SoakFailure as e:
        print(f"soak FAILED (seed {seed}, work kept in {work}): {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(report, indent=1))
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
