"""dataloaderd.trainers.lightning with the real lightning package under
torchrun (DDP, gloo, CPU), through the wrapper: examples/train_lightning.py
(Trainer + LoaderDataModule) and examples/train_fabric.py (Fabric +
LoaderState), each killed with kill -9 after a checkpoint made on 2 ranks and
resumed on 3: every token of the epoch exactly once, no rank's data dropped,
every rank ending at the same step."""

import os

import pytest

from torchrun_job import REPO, check_exactly_once, finish, kill_after_checkpoint, launch_script, make_job

pytest.importorskip("lightning")


@pytest.fixture
def job(tmp_path):
    return make_job(tmp_path)


def test_trainer_killed_resumes_on_3_ranks_exactly_once(job):
    script = os.path.join(REPO, "examples", "train_lightning.py")
    # The mixture changes at the checkpoint's step, after the next batch was fetched:
    # the change travels beside the state saved (LoaderDataModule.state_dict).
    first = launch_script(job, "a", 2, script, 5, extra=("--mix-at", "10"))
    saved = kill_after_checkpoint(job, "a", first, 10)
    resumed = launch_script(job, "b", 3, script, 5, resume=True, extra=("--mix-at", "10"))
    finish(job, "b", resumed)
    after = check_exactly_once(job, "a", 2, "b", 3, saved)
    assert all(r["global_step"] == r["step"] - 1 for recs in after.values() for r in recs), \
        "Lightning's step and the loader's disagree after the resume"


def test_fabric_killed_resumes_on_3_ranks_exactly_once(job):
    script = os.path.join(REPO, "examples", "train_fabric.py")
    first = launch_script(job, "a", 2, script, 5)
    saved = kill_after_checkpoint(job, "a", first, 10)
    resumed = launch_script(job, "b", 3, script, 5, resume=True)
    finish(job, "b", resumed)
    check_exactly_once(job, "a", 2, "b", 3, saved)


@pytest.mark.parametrize("arg", [{"end": "stop"}, {"copy": False}])
def test_datamodule_refuses_what_breaks_its_promises(arg):
    from dataloaderd.errors import ConfigError
    from dataloaderd.trainers.lightning import LoaderDataModule

    with pytest.raises(ConfigError, match="under Lightning it must be"):
        LoaderDataModule({}, **arg)
