"""Another user on the node who can reach the daemon's socket (a member of its
group) and knows a session's id and job: every call on that session is
SessionNotFoundError (NOT_FOUND from the daemon), nothing is written for it,
the job and rank it opens are its own, and the victim reads on. Before,
the id was enough: GetState, SaveState and CloseSession succeeded, and the
victim's job and rank could be squatted.

The other user is uid 65534 (nobody); creating a process as another user
needs root, which CI is. The intruder is scripts/soak/intruder.py, the same
one the soak runs."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dataloaderd import Loader

INTRUDER = Path(__file__).resolve().parents[3] / "scripts" / "soak" / "intruder.py"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user, which needs root")


def open_to_others(path: Path) -> None:
    """Lets another user traverse the directories down to path."""
    top = Path(tempfile.gettempdir()).resolve()
    for d in [path, *path.parents]:
        if d == top or d == Path("/"):
            break
        os.chmod(d, 0o711)


def test_another_user_cannot_use_a_session_by_its_id(daemon, config, tmp_path):
    open_to_others(tmp_path)
    os.chmod(daemon.socket, 0o666)  # as the socket's group would let its members in
    folder = tmp_path / "intruder-save"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="default") as victim:
        it = iter(victim)
        first = next(it)
        sid = victim._session.session_id
        arg = {"uid": 65534, "socket": daemon.socket, "session": sid, "job": "default", "config": config,
               "folder": str(folder)}
        out = subprocess.run([sys.executable, str(INTRUDER), json.dumps(arg)], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        for op in ("GetState", "SaveState", "CloseSession"):
            assert got[op] == "SessionNotFoundError", f"another user's {op} on the victim's session: {got[op]}"
        assert got["own_session"] and got["own_session"] != sid, got
        assert not list(folder.iterdir()), "the intruder's SaveState wrote into its folder"
        second = next(it)
        assert second["step"] == first["step"] + 1
        victim.save(str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "dataloader" / "rank-0-of-1.json").is_file()


# Run as root, then as the other user: saves a session of its own into each
# folder of "save" and resumes from each of "resume", and prints each
# outcome: "OK", or the exception's class and message.
OTHER_USER = """
import json, os, sys
from dataloaderd import DataloaderdError, Loader
a = json.loads(sys.argv[1])
os.setgroups([])
os.setgid(a["uid"])
os.setuid(a["uid"])
got = {}
def outcome(call):
    try:
        call()
        return "OK"
    except DataloaderdError as e:
        return f"{type(e).__name__}: {e}"
with Loader(a["config"], socket=a["socket"], dp_rank=0, dp_size=1, job="mine", transport="inline") as mine:
    next(iter(mine))
    for f in a["save"]:
        got["save " + f] = outcome(lambda: mine.save(f))
for i, f in enumerate(a["resume"]):
    with Loader(a["config"], socket=a["socket"], dp_rank=0, dp_size=1, job=f"r{i}", transport="inline",
                resume_from=f) as r:
        got["resume " + f] = outcome(lambda: next(iter(r)))
print(json.dumps(got))
"""


def test_another_user_reads_and_writes_with_its_own_rights(daemon, config, tmp_path):
    # With only a session of its own, the other user saved into the
    # trainer's 0700 checkpoint folder (replacing the trainer's rank file)
    # and resumed from a rank file it could not read: the daemon did both
    # with its own rights. Now each is PathNotAllowedError naming the path
    # and the user, and the trainer's file is untouched; a folder the other
    # user may write takes its save, made its own.
    open_to_others(tmp_path)
    os.chmod(daemon.socket, 0o666)
    private, readable, shared = tmp_path / "private", tmp_path / "readable", tmp_path / "shared"
    with Loader(config, socket=daemon.socket, dp_rank=0, dp_size=1, job="trainer") as trainer:
        it = iter(trainer)
        for _ in range(5):
            next(it)
        trainer.save(str(private))
        trainer.save(str(readable))
    os.chmod(private, 0o700)
    os.chmod(readable, 0o755)
    os.chmod(readable / "dataloader", 0o755)  # the rank file stays 0600
    rank_file = private / "dataloader" / "rank-0-of-1.json"
    before = rank_file.read_bytes()
    shared.mkdir()
    os.chmod(shared, 0o777)
    arg = {"uid": 65534, "socket": daemon.socket, "config": config,
           "save": [str(private), str(shared / "ckpt")], "resume": [str(private), str(readable)]}
    out = subprocess.run([sys.executable, "-c", OTHER_USER, json.dumps(arg)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    for call, path in [("save " + str(private), private), ("resume " + str(private), private),
                       ("resume " + str(readable), readable / "dataloader" / "rank-0-of-1.json")]:
        assert got[call].startswith("PathNotAllowedError: ") and str(path) in got[call] and "uid 65534" in got[call], \
            f"{call}: {got[call]}"
    assert got["save " + str(shared / "ckpt")] == "OK", got
    assert rank_file.read_bytes() == before, "the other user's save replaced the trainer's rank file"
    saved = shared / "ckpt" / "dataloader" / "rank-0-of-1.json"
    assert (saved.stat().st_uid, saved.parent.stat().st_uid) == (65534, 65534)
