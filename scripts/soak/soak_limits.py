"""Noisy clients that push the daemon's bounds (issue 23): skips past the
bound or too costly to make, and an object store that lies about a noise
job's objects. Each must be refused (or, where legal, served right) quickly,
with the daemon alive and serving the others; never wrong data."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Tuple

import grpc
from corpus import data_tokens, make_corpus
from dataloaderd import DataloaderdError
from dataloaderd._proto import dataloader_pb2 as pb
from dataloaderd._proto import dataloader_pb2_grpc as pb_grpc
from dataloaderd.config import to_proto
from soak_noise import KINDS, Noise
from soak_s3 import BUCKET

# The daemon's bound on skip_to_step in batches (internal/session/open.go
# MaxSkip at 6031225); issue 23 asks for one by tokens as well.
MAX_SKIP_BATCHES = 1 << 16
FAR_SKIP = 1 << 40  # steps: past any bound
ANSWER_WITHIN = 10.0  # seconds a refusal (or a legal skip) may take
COMPARED_BATCHES = 40  # batches of the range-ignoring store's job checked against the local copy
# Sizes a lying store reports for a .bin: 1 PiB (the block table alone is
# 256 GiB) and 4 EiB (its length overflows a makeslice).
LIED_SIZES = (1 << 50, 1 << 62)
# The gRPC codes of a request refused for what it asks.
REFUSED = {"INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED"}


def _open_skipping(n: Noise, config: Dict[str, Any], to: int) -> Tuple[str, float]:
    """OpenSession of a fresh job's rank 0 moved to step `to` (inline
    transport, two slots); its outcome (OK or the gRPC code) and how long it
    took. A session it opens is closed."""
    start = time.monotonic()
    with grpc.insecure_channel("unix://" + n.d.socket) as ch:
        stub = pb_grpc.LoaderStub(ch)
        try:
            resp = stub.OpenSession(pb.OpenSessionRequest(
                job=f"{n.job}-skip", config=to_proto(config, "/"), dp_rank=0, dp_size=1,
                transport=pb.TRANSPORT_INLINE, slots=2, skip_to_step=to), timeout=ANSWER_WITHIN)
        except grpc.RpcError as e:
            code_of = getattr(e, "code", None)  # a bare RpcError has none
            code = code_of() if callable(code_of) else None
            if not isinstance(code, grpc.StatusCode) or code == grpc.StatusCode.UNAVAILABLE:
                raise  # the daemon went away: excused only if the soak killed it
            return code.name, time.monotonic() - start
        took = time.monotonic() - start
        stub.CloseSession(pb.CloseSessionRequest(session_id=resp.session_id), timeout=30)
        return "OK", took


def _still_serves(n: Noise, what: str) -> None:
    """A fresh loader of the round's corpus gets a batch within ANSWER_WITHIN."""
    start = time.monotonic()
    with n.loader(n.config, job=f"{n.job}-after", transport="inline", batch_timeout=ANSWER_WITHIN) as loader:
        next(iter(loader))
    if time.monotonic() - start > ANSWER_WITHIN:
        n.errors.append(f"{what}: the daemon took {time.monotonic() - start:.1f} s to serve a batch afterwards")


def skip_beyond(n: Noise) -> None:
    """An open that asks to skip 2^40 steps (as a reconnecting client would
    name the step it had read): refused at once as a bad request."""
    got, took = _open_skipping(n, n.config, FAR_SKIP)
    if got not in REFUSED or took > ANSWER_WITHIN / 2:
        n.errors.append(f"skip_beyond: skip_to_step {FAR_SKIP} got {got} after {took:.1f} s; "
                        f"want a refusal ({', '.join(sorted(REFUSED))}) within {ANSWER_WITHIN / 2:.0f} s")
    _still_serves(n, "skip_beyond")


def skip_costly(n: Noise) -> None:
    """An open that skips MaxSkip batches of 2^23 tokens each (2^39 tokens):
    legal by the batch bound, hours of a core when made a batch at a time.
    It must be refused, or made, within ANSWER_WITHIN; the daemon serves on."""
    config = dict(n.config, seq_len=1 << 20, batch_size=8, epochs=0)
    got, took = _open_skipping(n, config, MAX_SKIP_BATCHES)
    if got == "DEADLINE_EXCEEDED":
        n.errors.append(f"skip_costly: skip_to_step {MAX_SKIP_BATCHES} of seq_len 2^20 x batch_size 8 had no "
                        f"answer within {ANSWER_WITHIN:.0f} s (the daemon skips on, a batch at a time?)")
    _still_serves(n, "skip_costly")


def _s3_corpus(n: Noise, prefix: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A corpus of its own under s3://BUCKET/prefix (one dataset of about
    36 KB, several of the soak's 4 KiB blocks): its config on the store and
    the same config on the store's local files."""
    assert n.proxy is not None
    folder = n.proxy.s3.object_path(BUCKET, prefix)
    os.makedirs(folder)
    local, _ = make_corpus(folder, seed=n.rng.randrange(1 << 30), sizes=((300, 60),))
    remote = [dict(d, path=f"s3://{BUCKET}/{prefix}{os.path.basename(d['path'])}") for d in local]
    base = {"seq_len": 31, "batch_size": 2, "seed": n.rng.randrange(1000), "logical_shards": 4, "eos_id": 0,
            "epochs": 0}
    return dict(base, datasets=remote), dict(base, datasets=local)


def s3_size_lie(n: Noise) -> None:
    """The store reports a huge size for the noise job's .bin (HEAD and
    listing): its open must be refused with an error that names the
    dataset and the size, quickly, and the daemon must live on."""
    assert n.proxy is not None
    prefix = f"{n.job}/"
    remote, _ = _s3_corpus(n, prefix)
    size = n.rng.choice(LIED_SIZES)
    with n.proxy.lock:
        n.proxy.sizes[prefix] = size
    start, kills = time.monotonic(), n.d.kills
    try:
        with n.loader(remote, batch_timeout=60) as loader:
            next(iter(loader))
        n.errors.append(f"s3_size_lie: a .bin reported as {size} bytes was opened and read")
    except DataloaderdError as e:
        took = time.monotonic() - start
        name = f"s3://{BUCKET}/{prefix}d0"
        if n.d.kills != kills or n.d.crashes_within(2.0):
            raise  # the soak killed the daemon (excused), or it died of this (an error)
        if name not in str(e) or str(size) not in str(e):
            n.errors.append(f"s3_size_lie: the error does not name {name} and the size {size} it was told: {e}")
        if took > ANSWER_WITHIN:
            n.errors.append(f"s3_size_lie: the refusal took {took:.1f} s")
    finally:
        with n.proxy.lock:
            del n.proxy.sizes[prefix]


def s3_ignore_range(n: Noise) -> None:
    """The store answers the noise job's ranged GETs of its .bin with 200
    and the whole object: every batch it gets must equal the same job's on
    the local copy, up to an error (expected: the answers are never right)."""
    assert n.proxy is not None
    prefix = f"{n.job}/"
    remote, local = _s3_corpus(n, prefix)
    want: List[List[int]] = []
    with n.loader(local, job=f"{n.job}-local", batch_timeout=60) as loader:
        for batch in loader:
            want.append(data_tokens(batch["tokens"]).tolist())
            if len(want) == COMPARED_BATCHES:
                break
    with n.proxy.lock:
        n.proxy.whole.add(prefix)
    kills = n.d.kills
    try:
        with n.loader(remote, batch_timeout=60) as loader:
            for i, batch in enumerate(loader):
                if data_tokens(batch["tokens"]).tolist() != want[i]:
                    n.errors.append(f"s3_ignore_range: batch {i} (step {batch['step']}) differs from the local "
                                    "copy's: wrong data from a store that ignored Range, with no error")
                    return
                if i + 1 == COMPARED_BATCHES:
                    return
    except DataloaderdError:
        if n.d.kills != kills or n.d.crashes_within(2.0):
            raise  # the soak killed the daemon (excused), or it died of this (an error)
    finally:
        with n.proxy.lock:
            n.proxy.whole.discard(prefix)


KINDS.update(skip_beyond=skip_beyond, skip_costly=skip_costly, s3_size_lie=s3_size_lie,
             s3_ignore_range=s3_ignore_range)
