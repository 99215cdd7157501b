"""The fault soak's own checks, without a daemon (scripts/soak): the count of
lost, repeated and foreign tokens its report gives, its --faults list, the
mixture changes its ranks queue, and the faults its S3 proxy injects (in
front of a stand-in store that answers as S3 does)."""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Iterator, Tuple

import pytest

SOAK = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "soak")
sys.path.insert(0, SOAK)

from soak_job import Counts, count_tokens  # noqa: E402
from soak_s3 import FaultProxy  # noqa: E402


def test_a_lost_and_a_repeated_token_are_counted():
    # Token 3 never served, token 2 served twice.
    got = count_tokens([1, 2, 4, 2, 5], {1, 2, 3, 4, 5})
    assert got == Counts(served=5, lost=1, repeated=1, foreign=0)
    assert got.bad()


def test_foreign_and_thrice_served_tokens_are_counted():
    got = count_tokens([7, 1, 1, 1, 9, 9, 2], {1, 2})
    assert got == Counts(served=7, lost=0, repeated=2, foreign=3)
    assert got.bad()


def test_every_token_once_is_clean_and_sums_add_up():
    total = Counts()
    total.add(count_tokens([3, 1, 2], {1, 2, 3}))
    assert not total.bad() and total.served == 3
    total.add(count_tokens([1], {1, 2}))
    assert total == Counts(served=4, lost=1, repeated=0, foreign=0)


def test_faults_are_chosen_by_name():
    from soak import parse_faults
    from soak_rounds import ALL_FAULTS

    assert parse_faults("all") == set(ALL_FAULTS)
    assert parse_faults("all,-s3_size_lie,-skip_costly") == set(ALL_FAULTS) - {"s3_size_lie", "skip_costly"}
    assert parse_faults("kill9_rank, set_weights") == {"kill9_rank", "set_weights"}
    with pytest.raises(SystemExit, match="unknown fault 'kill9_dameon'"):
        parse_faults("kill9_dameon")


def test_every_rank_queues_the_same_changes():
    # By path: this folder has a worker.py of its own.
    spec = importlib.util.spec_from_file_location("soak_worker", os.path.join(SOAK, "worker.py"))
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    weight_change = worker.weight_change

    given = {"seed": 5, "p": 0.5, "names": ["d0", "d1"]}
    changes = [weight_change(given, s) for s in range(200)]
    assert changes == [weight_change(dict(given), s) for s in range(200)]  # a function of the step alone
    made = [(s, c) for s, c in enumerate(changes) if c is not None]
    assert 60 < len(made) < 140
    assert all(s < c[0] <= s + 12 and min(c[1].values()) > 0 and set(c[1]) == {"d0", "d1"} for s, c in made)
    assert weight_change(None, 3) is None


OBJECT = bytes(range(256)) * 64  # 16 KiB
LISTING = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>soak</Name>'
           b"<Contents><Key>p/d0.bin</Key><Size>16384</Size></Contents>"
           b"<Contents><Key>p/d0.idx</Key><Size>99</Size></Contents></ListBucketResult>")


class _Store(http.server.BaseHTTPRequestHandler):
    """A stand-in S3 server: one object, p/d0.bin; a listing; ranges."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self.reply(200, b"", len(OBJECT))

    def do_GET(self) -> None:
        if self.path.startswith("/soak?"):
            return self.reply(200, LISTING)
        lo, hi = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        self.reply(206, OBJECT[lo:hi + 1], extra=[("Content-Range", f"bytes {lo}-{hi}/{len(OBJECT)}")])

    def reply(self, status: int, body: bytes, length: int = -1, extra: Tuple[Tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length < 0 else length))
        self.send_header("ETag", '"e1"')
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _StandIn:
    """What FaultProxy uses of an S3Server."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port

    def object_path(self, bucket: str, key: str) -> str:
        return str(self.root / bucket / key)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[FaultProxy]:
    (tmp_path / "soak" / "p").mkdir(parents=True)
    (tmp_path / "soak" / "p" / "d0.bin").write_bytes(OBJECT)
    store = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=store.serve_forever, daemon=True).start()
    p = FaultProxy(_StandIn(tmp_path, store.server_address[1]), seed=1)  # type: ignore[arg-type]
    yield p
    p.close()
    store.shutdown()
    store.server_close()


def _ask(p: FaultProxy, method: str, path: str, **headers: str) -> Tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection(p.url.removeprefix("http://"), timeout=10)
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    conn.close()
    return out


def test_the_proxy_passes_answers_on_unchanged(proxy):
    assert _ask(proxy, "HEAD", "/soak/p/d0.bin")[1]["content-length"] == str(len(OBJECT))
    status, headers, body = _ask(proxy, "GET", "/soak/p/d0.bin", Range="bytes=100-199")
    assert (status, headers["content-range"], body) == (206, "bytes 100-199/16384", OBJECT[100:200])
    assert _ask(proxy, "GET", "/soak?list-type=2&prefix=p%2F")[2] == LISTING


def test_the_proxy_lies_about_sizes_of_bin_objects(proxy):
    proxy.sizes["p/"] = 1 << 50
    assert _ask(proxy, "HEAD", "/soak/p/d0.bin")[1]["content-length"] == str(1 << 50)
    body = _ask(proxy, "GET", "/soak?list-type=2&prefix=p%2F")[2]
    assert b"<Key>p/d0.bin</Key><Size>1125899906842624</Size>" in body
    assert b"<Key>p/d0.idx</Key><Size>99</Size>" in body
    assert proxy.counts["size_lies"] == 2


def test_the_proxy_ignores_range(proxy):
    proxy.whole.add("p/")
    status, headers, body = _ask(proxy, "GET", "/soak/p/d0.bin", Range="bytes=100-199")
    assert (status, "content-range" in headers, body) == (200, False, OBJECT)


def test_the_proxy_throttles_and_answers_for_a_store_that_is_down(proxy):
    proxy.throttle["p/"] = 1.0
    status, _, body = _ask(proxy, "GET", "/soak/p/d0.bin", Range="bytes=0-9")
    assert status == 503 and b"<Code>SlowDown</Code>" in body
    proxy.throttle.clear()
    proxy.s3.port = 1  # nothing listens there
    assert _ask(proxy, "HEAD", "/soak/p/d0.bin")[0] == 502
    assert (proxy.counts["throttled"], proxy.counts["refused_while_down"]) == (1, 1)
