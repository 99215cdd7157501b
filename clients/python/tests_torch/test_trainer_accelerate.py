"""dataloaderd.trainers.accelerate with the real accelerate package under
torchrun (DDP, gloo, CPU), through the wrapper: examples/train_accelerate.py
saves with accelerator.save_state on 2 ranks, is killed with kill -9, and
resumes with accelerator.load_state on 3: every token of the epoch exactly
once, no rank's data dropped, every rank ending at the same step."""

import os

import pytest

from torchrun_job import REPO, check_exactly_once, finish, kill_after_checkpoint, launch_script, make_job

pytest.importorskip("accelerate")


def test_killed_resumes_on_3_ranks_exactly_once(tmp_path):
    job = make_job(tmp_path)
    script = os.path.join(REPO, "examples", "train_accelerate.py")
    first = launch_script(job, "a", 2, script, 5)
    saved = kill_after_checkpoint(job, "a", first, 10)
    resumed = launch_script(job, "b", 3, script, 5, resume=True)
    finish(job, "b", resumed)
    check_exactly_once(job, "a", 2, "b", 3, saved)
    # every rank wrote its own cursors into the state folder (DCP: one file per rank)
    parts = os.listdir(tmp_path / "ckpt" / f"step-{saved}" / "dataloaderd")
    assert sorted(p for p in parts if p.endswith(".distcp")) == ["__0_0.distcp", "__1_0.distcp"], parts


def test_anything_but_a_loader_is_refused():
    from dataloaderd.trainers.accelerate import checkpoint_loader

    with pytest.raises(TypeError, match="reads rank 0's stream on every rank"):
        checkpoint_loader(object(), [iter(())])
