"""Smoke test of the benchmark program: scripts/bench.py --quick against the
real daemon binary, without the peer loaders (no torch needed). The full
benchmark is `make bench`, never part of the tests."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BIN, REPO

BENCH = os.path.join(REPO, "scripts", "bench.py")

TOKEN_ROWS = ["go_copy", "numpy_copy", "go_rank", "go_pipeline",
              "e2e_shm_1", "e2e_shm_2", "e2e_inline_1", "e2e_inline_2"]
OTHER_ROWS = ["wait_shm_p50", "wait_shm_p99", "wait_inline_p50", "wait_inline_p99",
              "ttfb_1x", "ttfb_20x", "save_client", "save_daemon", "state_bytes",
              "rss_1x", "rss_20x", "rss_e2e", "anon_1x", "anon_20x", "anon_e2e"]
PEER_ROWS = ["peer_torch", "peer_stateful", "peer_streaming", "mds_convert"]


@pytest.mark.skipif(shutil.which("go") is None, reason="the benchmark runs go test -bench")
def test_bench_quick(tmp_path):
    out = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, BENCH, "--quick", "--no-peers", "--daemon", BIN, "--out", str(out),
         "--clients", "1,2", "--seconds", "0.3", "--go-benchtime", "20ms"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((out / "quick.json").read_text())
    md = (out / "quick.md").read_text()
    assert not list(out.glob("*.tmp"))

    assert result["mode"] == "quick"
    assert result["machine"]["cores"] >= 1
    assert result["workload"]["seq_len"] == 4096 and result["workload"]["lines_per_batch"] == 8
    assert result["corpus"]["tokens"] > 0 and result["corpus"]["sparse_tokens"] == 20 * result["corpus"]["tokens"]
    rows = {r["key"]: r for r in result["rows"]}
    for key in TOKEN_ROWS + OTHER_ROWS + PEER_ROWS:
        assert key in rows, key
        assert rows[key]["label"] in md
    for key in TOKEN_ROWS + OTHER_ROWS:
        r = rows[key]
        assert r["samples"], key
        assert 0 < r["min"] <= r["median"] <= r["max"], (key, r)
    for key in TOKEN_ROWS:
        assert 1e5 < rows[key]["median"] < 1e12, (key, rows[key])
    # Ratios: the copies are their own basis; the Go rows use the Go copy,
    # the client rows the numpy copy, and nothing outruns memory by far.
    assert rows["go_copy"]["ratio"] == 1.0 and rows["numpy_copy"]["ratio"] == 1.0
    assert rows["go_rank"]["ratio_to"] == "go_copy" and 0 < rows["go_rank"]["ratio"] < 3
    assert rows["e2e_shm_1"]["ratio_to"] == "numpy_copy" and 0 < rows["e2e_shm_1"]["ratio"] < 3
    assert rows["wait_shm_p50"]["median"] <= rows["wait_shm_p99"]["median"]
    assert rows["ttfb_1x"]["median"] < 30 and rows["ttfb_20x"]["median"] < 30
    assert 100 < rows["state_bytes"]["median"] < 10 << 20
    assert rows["rss_1x"]["median"] > 1 << 20
    for key in PEER_ROWS:  # --no-peers: present, empty
        assert rows[key]["median"] is None and rows[key]["samples"] == []
    assert result["peers"] == {"skipped": "--no-peers"}
