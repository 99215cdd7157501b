"""Smoke test of the benchmark program: scripts/bench.py --quick against the
real daemon binary, without the peer loaders (no torch needed), with the
tokenizer and text rows when the rank files are there. The full benchmark is
`make bench`, never part of the tests."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from rundaemon import BIN, REPO

BENCH = os.path.join(REPO, "scripts", "bench.py")

TOKEN_ROWS = ["go_copy", "numpy_copy", "go_rank", "go_pipeline", "go_pipeline_meta",
              "e2e_shm_meta_1",
              "e2e_shm_1", "e2e_shm_int32_1", "e2e_shm_2", "e2e_inline_1", "e2e_inline_2"]
OTHER_ROWS = ["go_guard_ratio", "wait_shm_p50", "wait_shm_p99", "wait_inline_p50", "wait_inline_p99",
              "ttfb_1x", "ttfb_20x", "save_client", "save_daemon", "state_bytes",
              "rss_1x", "rss_20x", "rss_e2e", "anon_1x", "anon_20x", "anon_e2e"]
PEER_ROWS = ["peer_torch", "peer_stateful", "peer_streaming", "mds_convert"]
ENCODINGS = ["r50k_base", "cl100k_base", "o200k_base"]
TEXT_TOKEN_ROWS = ([f"tok_tiktoken_{e}" for e in ENCODINGS] + [f"tok_go_{e}" for e in ENCODINGS] +
                   ["tok_allcore", "e2e_text_shm_1", "e2e_textgz16_shm_1", "e2e_textgz1_shm_1", "prepare_text"])
TEXT_OTHER_ROWS = ["ttfb_text", "ttfb_textgz16", "ttfb_textgz1", "rss_text", "anon_text"]
# The tokenizer and text rows need the rank files (make test fetches them and
# sets DATALOADERD_TOKENIZER_VOCAB) and tiktoken (in .venv); without them the
# benchmark skips those rows and says why.
VOCAB = os.environ.get("DATALOADERD_TOKENIZER_VOCAB") or os.path.join(REPO, ".tools", "tokenize", "vocab")


def have_tokenizer():
    try:
        import tiktoken  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return all(os.path.exists(os.path.join(VOCAB, e + ".tiktoken")) for e in ENCODINGS)


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

    # The targets, each with a verdict, in the JSON and the Markdown.
    assert len(result["targets"]) == 11
    dtype = [t for t in result["targets"] if t["target"].startswith("the default dtype")]
    assert len(dtype) == 1 and dtype[0]["measured"].startswith("default / int32 = "), dtype
    guard = [t for t in result["targets"] if t["target"].startswith("fault guard")]
    assert len(guard) == 1 and guard[0]["measured"].startswith("guarded / unguarded pipeline = "), guard
    assert all(t["met"] in (True, False, None) and t["measured"] for t in result["targets"])
    assert "| target |" in md
    assert [t["met"] for t in result["targets"] if t["target"].startswith(">= 1000x")] == [None]  # no peers

    for key in TEXT_TOKEN_ROWS + TEXT_OTHER_ROWS:
        assert key in rows and rows[key]["label"] in md, key
    if not have_tokenizer():
        assert "skipped" in result["tokenize"]
        for key in TEXT_TOKEN_ROWS + TEXT_OTHER_ROWS:
            assert rows[key]["samples"] == [], key
        return
    for key in TEXT_TOKEN_ROWS + TEXT_OTHER_ROWS:
        r = rows[key]
        assert r["samples"], key
        assert 0 < r["min"] <= r["median"] <= r["max"], (key, r)
    for key in TEXT_TOKEN_ROWS:
        assert 1e4 < rows[key]["median"] < 1e11, (key, rows[key])
    for e in ENCODINGS:  # Go next to tiktoken on the same text
        assert rows[f"tok_tiktoken_{e}"]["ratio"] == 1.0
        assert rows[f"tok_go_{e}"]["ratio_to"] == f"tok_tiktoken_{e}" and 0 < rows[f"tok_go_{e}"]["ratio"] < 100
    for key in ("e2e_text_shm_1", "prepare_text"):  # below the tokenizer's own all-core rate
        assert rows[key]["ratio_to"] == "tok_allcore" and 0 < rows[key]["ratio"] < 3, (key, rows[key])
    assert rows["ttfb_text"]["median"] < 30
    tok = result["tokenize"]
    assert tok["text_corpus"]["bytes"] > 1e6 and tok["prepare"]["tokens"] > 1e5
    assert tok["on_the_fly"]["tokenizer"] == "cl100k_base"
