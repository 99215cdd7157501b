"""Runs the real daemon binary (DATALOADERD_BIN, default bin/dataloaderd) on a
socket in a temp dir for each test that asks for it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from corpus import make_corpus  # noqa: E402

from rundaemon import BIN, REPO, SHM, Daemon, dataloaderd_maps, rings_of_other_daemons  # noqa: E402,F401


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: List[Daemon] = []

    def start(*extra: str) -> Daemon:
        sub = tmp_path / f"daemon{len(started)}"
        sub.mkdir()
        d = Daemon(sub, extra)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def config(tmp_path: Path) -> Dict[str, Any]:
    """A job config over the small test corpus (test modules may override it)."""
    datasets, _ = make_corpus(str(tmp_path))
    return {"seq_len": 31, "batch_size": 3, "seed": 5, "logical_shards": 8, "eos_id": 0, "datasets": datasets}
