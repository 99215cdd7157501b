"""docs/loss-spike.md, end to end, as the page does it: examples/train_gpt.py
under torchrun (2 ranks, DDP, DCP) logs each batch's id and loss; the step
with the highest loss is "the spike"; `dataloaderd explain` names what made
it from the run's own checkpoint; the job restarts from the checkpoint
before it with `--skip-steps` (the config key skip_steps), and goes on: the
steps before the range and after it are the first run's batches, token for
token, the range's batches never come, every other token of the epoch is
trained once, and `dataloaderd inspect` shows the range in the later
checkpoints."""

import json
import os
import subprocess

from torchrun_job import BIN, REPO, finish, launch_script, make_job, records

SAVE_EVERY = 5


def launch(job, name, extra=(), resume=False):
    return launch_script(job, name, 2, os.path.join(REPO, "examples", "train_gpt.py"), SAVE_EVERY, resume, extra)


def by_step(recs):
    return {r["step"]: r for r in recs}


def test_loss_spike_found_explained_and_skipped(tmp_path):
    job = make_job(tmp_path)
    first = launch(job, "a")
    finish(job, "a", first)
    a = {rank: by_step(recs) for rank, recs in records(job, "a")[2].items()}
    data_steps = sorted(s for s, r in a[0].items() if not r["padding"] and not a[1][s]["padding"])
    assert len(data_steps) > 20, "the corpus is too small for the scenario"

    # 1. Find the step: the highest loss, over both ranks, past the first
    # checkpoints (what a trainer's own loss curve shows).
    candidates = [s for s in data_steps if 2 * SAVE_EVERY < s <= data_steps[-1] - 4]
    spike = max(candidates, key=lambda s: a[0][s]["loss"] + a[1][s]["loss"])
    ckpt = (spike - 2) // SAVE_EVERY * SAVE_EVERY  # the last checkpoint before the range
    first_skipped, last_skipped = spike - 1, spike + 1

    # 2. Explain it: from the batch id rank 0 logged, and the checkpoint.
    bid = a[0][spike]["batch_id"]
    out = subprocess.run([BIN, "explain", "--batch-id", bid, "--from", str(tmp_path / "ckpt" / f"step-{ckpt}"),
                          "--json", job["config"]], check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    pieces = report["pieces"]
    config = json.loads(open(job["config"]).read())
    assert {p["batch_id"] for p in pieces} == {bid} and {p["step"] for p in pieces} == {spike}
    assert sorted({p["line"] for p in pieces}) == list(range(config["batch_size"]))
    for line in range(config["batch_size"]):
        cols = sorted((p["column_start"], p["column_end"]) for p in pieces if p["line"] == line)
        assert cols[0][0] == 0 and all(x[1] == y[0] for x, y in zip(cols, cols[1:])), f"line {line}: {cols}"
        assert cols[-1][1] <= config["seq_len"] + 1

    # 3. Restart from the checkpoint before it, skipping the range.
    resumed = launch(job, "b", ["--from", f"step-{ckpt}", "--skip-steps", f"{first_skipped}-{last_skipped}"],
                     resume=True)
    finish(job, "b", resumed)
    b = {rank: by_step(recs) for rank, recs in records(job, "b")[2].items()}
    skipped = set(range(first_skipped, last_skipped + 1))
    for rank in (0, 1):
        want = [s for s in sorted(a[rank]) if s > ckpt and s not in skipped]
        assert sorted(b[rank]) == want, f"rank {rank}: steps after the restart"
        for s in want:
            assert b[rank][s]["tokens"] == a[rank][s]["tokens"], f"rank {rank} step {s} differs from the first run"
            assert b[rank][s]["batch_id"] == a[rank][s]["batch_id"]
    gone = {t for rank in (0, 1) for s in skipped for t in a[rank][s]["tokens"] if t != 0}
    trained = [t for rank in (0, 1) for s, r in a[rank].items() if s <= ckpt for t in r["tokens"]] + \
              [t for rank in (0, 1) for r in b[rank].values() for t in r["tokens"]]
    trained = [t for t in trained if t != 0]
    assert len(trained) == len(set(trained)), "a token was trained twice"
    assert not gone & set(trained), "a token of the skipped steps was trained after the restart"
    assert set(trained) | gone == job["tokens"], "a token outside the range was never trained"

    # 4. The later checkpoints log the range.
    later = max(int(d.split("-")[1]) for d in os.listdir(tmp_path / "ckpt") if d.startswith("step-"))
    assert later > last_skipped
    got = json.loads(subprocess.run([BIN, "inspect", "--json", str(tmp_path / "ckpt" / f"step-{later}")],
                                    check=True, capture_output=True, text=True).stdout)
    assert [(r["first"], r["last"]) for r in got["skips"]] == [(first_skipped, last_skipped)], got["skips"]
