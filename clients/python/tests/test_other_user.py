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
