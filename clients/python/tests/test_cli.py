"""The daemon binary's command line, as users meet it: the version that
`make build` stamps names the commit it was built from, and --help exits 0."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import BIN, REPO


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout.strip()


def in_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    return subprocess.run(["git", "-C", REPO, "rev-parse", "--git-dir"], capture_output=True).returncode == 0


@pytest.mark.skipif(not in_checkout(), reason="not a git checkout: make build stamps no commit")
def test_version_names_the_commit() -> None:
    # BIN is what `make build` wrote (make test-python builds it first): its
    # version is the git describe of this checkout, so it resolves to HEAD.
    for flag in ("version", "--version"):
        p = subprocess.run([BIN, flag], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        name, _, described = p.stdout.strip().partition(" ")
        assert name == "dataloaderd" and described not in ("", "dev"), p.stdout
        described = described.removesuffix("-dirty")
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", "--quiet", described + "^{commit}"],
                                capture_output=True, text=True)
        assert commit.returncode == 0, f"{described!r} names no commit of {REPO}"
        assert commit.stdout.strip() == git("rev-parse", "HEAD"), (described, "is not HEAD")


@pytest.mark.parametrize("cmd", [["--help"], ["serve", "--help"], ["healthcheck", "-h"], ["prepare", "--help"]])
def test_help_exits_zero(cmd: list[str]) -> None:
    p = subprocess.run([BIN, *cmd], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "Usage:" in p.stdout and p.stderr == "", (p.returncode, p.stdout, p.stderr)
