"""The soak's rounds (soak.py describes them): the daemon, and the S3 server
and its fault proxy when an s3_* fault is on; per round a job on a corpus of
its own (local, or on the store), its mixture, its faults and noisy clients;
and the figures of the report."""

from __future__ import annotations

import glob
import os
import random
import shutil
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Set

import soak_limits  # noqa: F401  (adds its kinds of noise to KINDS)
from corpus import make_corpus
from soak_daemon import IDLE_LIMIT, Daemon, SoakFailure, settle
from soak_job import Counts, Job
from soak_noise import KINDS, Noise
from soak_s3 import BUCKET, FaultProxy, S3Server

JOB_FAULTS = ["kill9_daemon", "kill9_rank", "restart_daemon"]
ROUND_FAULTS = ["schedule", "set_weights"]
S3_ROUND_FAULTS = ["s3_restart", "s3_throttle"]
ALL_FAULTS = JOB_FAULTS + ROUND_FAULTS + S3_ROUND_FAULTS + list(KINDS)
S3_ROUND_CHANCE = 0.3  # and round 2 always: a 30 s soak has one
MIXTURE_CHANCE = 0.5  # that a round's job has a schedule; drawn apart, that its ranks call set_weights
SET_WEIGHTS_P = 0.08  # chance a rank queues a change after a batch (the same on every rank)
# The daemon's object storage settings under soak: small blocks, so that a
# corpus is many requests; retries short enough that a noise job the store
# lies to fails within a round, long enough for a restart of the store.
S3_FLAGS = ["--object-block-kb", "4", "--object-retry-for", "10s", "--object-cache-mb", "64"]


def schedule(rng: random.Random, names: List[str]) -> List[Dict[str, Any]]:
    """A mixture schedule of 2 to 4 points over the first 300 steps, some
    reached linearly; every weight positive, so that the bounded epoch still
    serves every token."""
    points: List[Dict[str, Any]] = []
    for i, step in enumerate(sorted(rng.sample(range(300), rng.randint(2, 4)))):
        point: Dict[str, Any] = {"step": step, "weights": {n: round(rng.uniform(0.2, 4.0), 2) for n in names}}
        if i and rng.random() < 0.5:
            point["linear"] = True
        points.append(point)
    return points


class Soak:
    """One soak: run() goes round after round until `seconds` have passed;
    report holds the figures so far, also when it fails."""

    def __init__(self, binary: str, seconds: float, seed: int, work: str, faults: Set[str], s3_server: str):
        self.binary, self.seconds, self.seed, self.work, self.on = binary, seconds, seed, work, faults
        self.s3_server = s3_server
        self.rng = random.Random(seed)
        self.counted: Counter[str] = Counter()  # faults injected, by name
        self.s3_counts: Counter[str] = Counter()  # what the fault proxy did
        self.totals = Counts()
        self.rounds = self.s3_rounds = self.temps_left = self.max_rss = 0
        self.deck: List[str] = []
        self.d: Optional[Daemon] = None
        self.s3: Optional[S3Server] = None
        self.proxy: Optional[FaultProxy] = None
        self.report: Dict[str, Any] = {}
        self.update_report()

    def update_report(self) -> None:
        faults = dict(self.counted)
        for name, what in (("s3_restart", "restarts"), ("s3_throttle", "throttled")):
            if self.s3_counts[what]:
                faults[name] = self.s3_counts[what]
        self.report = {
            "seconds": self.seconds, "seed": self.seed, "faults_on": sorted(self.on), "rounds": self.rounds,
            "s3_rounds": self.s3_rounds, "faults": faults, "tokens_checked": self.totals.served,
            "tokens_lost": self.totals.lost, "tokens_repeated": self.totals.repeated,
            "tokens_foreign": self.totals.foreign, "daemon_starts": self.d.starts if self.d else 0,
            "max_rss_mib": self.max_rss >> 20, "save_temps_left": self.temps_left}
        if self.proxy is not None:
            self.report["s3_proxy"] = dict(self.s3_counts)

    def run(self) -> None:
        try:
            self.start()
            assert self.d is not None
            deadline = time.monotonic() + self.seconds
            while self.rounds == 0 or time.monotonic() < deadline:
                self.rounds += 1
                self.round()
                self.update_report()
            self.d.stop()
        except BaseException:
            if self.d is not None and self.d.alive():
                self.d.kill9()
            raise
        finally:
            self.take_proxy_counts()
            self.update_report()
            if self.proxy is not None:
                self.proxy.close()
            if self.s3 is not None:
                self.s3.stop()

    def start(self) -> None:
        extra, env = ["--allow-root", self.work], {}
        if any(f.startswith("s3_") for f in self.on):
            self.s3 = S3Server(self.s3_server, self.work)
            self.s3.start()
            self.proxy = FaultProxy(self.s3, self.rng.randrange(1 << 30))
            extra += ["--allow-root", f"s3://{BUCKET}", *S3_FLAGS]
            env = self.proxy.environ()
        self.d = Daemon(self.binary, self.work, extra, env)
        self.d.start()

    def take_proxy_counts(self) -> None:
        if self.proxy is not None:
            for what in list(self.proxy.counts):
                self.s3_counts[what] += self.proxy.taken(what)

    def is_s3_round(self) -> bool:
        if self.proxy is None or not self.on & set(S3_ROUND_FAULTS):
            return False
        s3_only = not {f for f in self.on if not f.startswith("s3_")}
        return s3_only or self.rounds == 2 or self.rng.random() < S3_ROUND_CHANCE

    def round(self) -> None:
        assert self.d is not None
        rng, n, began = self.rng, self.rounds, time.monotonic()
        jdir = os.path.join(self.work, f"round-{n}")
        os.makedirs(jdir)
        prefix = f"round-{n}/" if self.is_s3_round() else ""
        cdir = self.proxy.s3.object_path(BUCKET, prefix) if self.proxy is not None and prefix else jdir
        os.makedirs(cdir, exist_ok=True)
        datasets, ranges = make_corpus(cdir, seed=rng.randrange(1 << 30), sizes=((2000, 60), (1500, 40)))
        if prefix:
            self.s3_rounds += 1
            datasets = [dict(d, path=f"s3://{BUCKET}/{prefix}{os.path.basename(d['path'])}") for d in datasets]
        config: Dict[str, Any] = {"seq_len": 31, "batch_size": 2, "seed": rng.randrange(1000), "logical_shards": 6,
                                  "eos_id": 0, "epochs": 1, "datasets": datasets}
        names = [d["name"] for d in datasets]
        if "schedule" in self.on and rng.random() < MIXTURE_CHANCE:
            config["schedule"] = schedule(rng, names)
            self.counted["schedule"] += 1
        weights = None
        if "set_weights" in self.on and rng.random() < MIXTURE_CHANCE:
            weights = {"seed": rng.randrange(1 << 30), "p": SET_WEIGHTS_P, "names": names}
        job = Job(f"soak{n}", jdir, config, {t for lo, hi in ranges for t in range(lo, hi)}, weights)
        if prefix and self.proxy is not None and "s3_throttle" in self.on:
            with self.proxy.lock:
                self.proxy.throttle[prefix] = rng.uniform(0.05, 0.3)
        noise = self.noise(config)
        for x in noise:
            x.start()
        try:
            self.drive(job, prefix, noise)
            driven = time.monotonic()
        except BaseException:
            job.kill_all()
            raise
        finally:
            if self.proxy is not None:
                with self.proxy.lock:
                    self.proxy.throttle.pop(prefix, None)
                self.proxy.disarm()
        self.finish(job, noise)
        kinds = [k for k, on in (("s3", prefix), ("schedule", "schedule" in config), ("set_weights", weights)) if on]
        print(f"round {n}: {time.monotonic() - began:.1f} s (job {driven - began:.1f} s), world sizes {job.worlds}, "
              f"{' '.join(kinds) or 'local'}; noise {' '.join(x.kind for x in noise) or 'none'}", flush=True)
        if cdir != jdir:
            shutil.rmtree(cdir)
        shutil.rmtree(jdir)

    def noise(self, config: Dict[str, Any]) -> List[Noise]:
        """One or two noisy clients, their kinds dealt from a shuffled deck of
        those on, so that every kind comes round."""
        assert self.d is not None
        kinds = [k for k in KINDS if k in self.on and (k != "other_user" or os.geteuid() == 0)
                 and (not k.startswith("s3_") or self.proxy is not None)]
        out: List[Noise] = []
        for i in range(self.rng.randint(1, 2) if kinds else 0):
            if not self.deck:
                self.deck = kinds[:]
                self.rng.shuffle(self.deck)
            out.append(Noise(self.deck.pop(), self.d, dict(config, epochs=0), random.Random(self.rng.random()),
                             self.counted, f"{self.rounds}-{i}", self.proxy))
        return out

    def drive(self, job: Job, prefix: str, noise: List[Noise]) -> None:
        """Runs the job's launches to the end of its epoch, with up to three
        faults at random moments."""
        d, rng = self.d, self.rng
        assert d is not None
        choices = ["none"] + [f for f in JOB_FAULTS if f in self.on]
        if prefix and "s3_restart" in self.on:
            choices.append("s3_restart")
        budget = 3  # faults this round, so that it ends
        job.launch(d.socket, rng.choice([1, 2, 3]))
        while True:
            until = time.monotonic() + rng.uniform(0.1, 1.0)
            state = job.poll()
            while state is None and time.monotonic() < until:
                time.sleep(0.02)
                state = job.poll()
            if state is True:
                return
            if state is False:
                # Most telling first: what noisy clients saw, a daemon that died.
                errors = [e for x in noise for e in x.errors]
                why = (f"; noisy clients: {errors}" if errors else "") + \
                    ("" if d.alive() else f"; the daemon died unasked: {d.logs()}")
                raise SoakFailure(f"a rank of {job.name} failed with no fault injected{why}; the ranks: {job.outputs()}")
            fault = rng.choice(choices) if budget else "none"
            if fault == "none":
                continue
            if fault == "s3_restart":
                # Armed: the proxy kills the store at the next request of
                # this round's corpus and starts it again (counted then).
                assert self.proxy is not None
                if self.proxy.arm_restart(prefix, rng.uniform(0.05, 1.0)):
                    budget -= 1
                continue
            if fault == "restart_daemon" and not job.all_reading():
                continue  # a rank that has not opened its session yet fails at once, by design
            self.counted[fault] += 1
            budget -= 1
            if fault == "restart_daemon":
                # As a supervisor restarts it: the ranks wait, reopen
                # their sessions and carry on, exactly, without a relaunch.
                d.kill9()
                time.sleep(rng.uniform(0.05, 1.0))
                d.start()
                continue
            if fault == "kill9_daemon":
                d.kill9()
            else:
                job.kill_one(rng)
            job.end_launch()
            if not d.alive():
                d.start()
            job.rewind()
            job.launch(d.socket, rng.choice([1, 2, 3]))

    def finish(self, job: Job, noise: List[Noise]) -> None:
        """The round's checks: every token once, the noisy clients' own
        checks, the daemon alive and back to its baseline."""
        d = self.d
        assert d is not None
        job.end_launch()
        counts = job.check()
        self.totals.add(counts)
        if job.weight_changes:
            self.counted["set_weights"] += job.weight_changes
        self.counted["resumes"] += job.launches - 1
        self.take_proxy_counts()
        if counts.bad():
            raise SoakFailure(f"job {job.name}: {counts.lost} tokens never served, {counts.repeated} servings "
                              f"repeated, {counts.foreign} not of its epoch, of {counts.served} served "
                              f"(world sizes {job.worlds}, resumed after steps {job.resumed}; its config in "
                              f"{job.work}/job.json)")
        for x in noise:
            x.join(timeout=120)
            if x.is_alive():
                raise SoakFailure(f"noisy client {x.kind} still running 120 s after its round's job ended")
            if x.errors:
                raise SoakFailure(f"noisy client failed oddly: {x.errors}")
        if self.proxy is not None and self.proxy.errors:
            raise SoakFailure(f"the S3 server: {self.proxy.errors}")
        if not d.alive():
            raise SoakFailure(f"the daemon died unasked: {d.logs()}")
        res = settle(d, timeout=30 + 2 * IDLE_LIMIT)
        self.max_rss = max(self.max_rss, res["rss"])
        if res["rss"] > max(2 * d.baseline["rss"], d.baseline["rss"] + (256 << 20)):
            raise SoakFailure(f"daemon RSS {res['rss'] >> 20} MiB, {d.baseline['rss'] >> 20} MiB at start")
        # Saves killed with their daemon or rank: the temp files they left
        # (a save names its file only once written: expected none).
        self.temps_left += len(glob.glob(os.path.join(job.work, "ckpt-L*", "step-*", "dataloader", ".rank-*.tmp*")))
