"""The control block of a shared-memory ring, seen by one consumer.

The daemon publishes "slot k holds step s" in the first pages of the ring file
and this consumer writes the last step it released there, so a batch costs no
message. Either side sleeps on a futex word only when it must wait, and says
so; the other side then wakes it. The offsets come from _ring_layout, which
`make generate` renders from the layout's one spec,
api/ring/v1/control_block.json (docs/control-block.md describes it; the
daemon's side is internal/ring/control.go).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
from typing import Optional, Tuple

from . import _ring_layout as _L

MAGIC = _L.MAGIC
VERSION = _L.VERSION

# Header offsets (bytes).
_VERSION, _SLOTS = _L.HEADER_VERSION, _L.HEADER_SLOTS
_PUBLISHED, _END_STEP, _STATE = _L.HEADER_PUBLISHED, _L.HEADER_END_STEP, _L.HEADER_STATE
_PUB_SEQ, _REL_SEQ, _PROD_WAITING = _L.HEADER_PUBLISH_SEQ, _L.HEADER_RELEASE_SEQ, _L.HEADER_PRODUCER_WAITING
_SLOT_RECS, _CONSUMER_RECS = _L.HEADER_SLOT_RECORDS, _L.HEADER_CONSUMER_RECORDS
_SLOT_REC_BYTES, _SLOT_STEP, _SLOT_LINES = _L.SLOT_RECORD_BYTES, _L.SLOT_RECORD_STEP, _L.SLOT_RECORD_LINES
_SLOT_SEGMENTS, _SLOT_MAX_SEQLEN = _L.SLOT_RECORD_SEGMENTS, _L.SLOT_RECORD_MAX_SEQLEN
_CONSUMER_REC_BYTES = _L.CONSUMER_RECORD_BYTES
# Consumer record offsets.
_RELEASED, _WAITING = _L.CONSUMER_RECORD_RELEASED, _L.CONSUMER_RECORD_WAITING
_WAIT_COUNT, _WAIT_SUM, _WAIT_BUCKETS = _L.CONSUMER_RECORD_WAIT_COUNT, _L.CONSUMER_RECORD_WAIT_SUM_NS, _L.CONSUMER_RECORD_WAIT_BUCKETS
_BUCKET_BOUNDS_NS = _L.WAIT_BUCKET_BOUNDS_NS

RUNNING, ENDED, FAILED, CLOSED = _L.STATE_RUNNING, _L.STATE_ENDED, _L.STATE_FAILED, _L.STATE_CLOSED

_SYS_FUTEX = 202  # x86_64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def supported() -> bool:
    """The control block is used on x86_64 Linux, where loads keep their order
    and stores theirs (a batch's announcement is never seen before its bytes,
    nor a release before the reads it ends); elsewhere the client takes
    batches from the stream. One pair is not ordered even there: the store of
    a release and the load of "producer waiting" after it. A wake-up lost that
    way costs one short sleep of the daemon's watcher, which re-polls within
    about 50 us while the producer waits (internal/session/feed.go)."""
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


class Control:
    """One consumer's view of a ring's control block (mapped read-write)."""

    def __init__(self, path: str, header_bytes: int, consumer: int):
        fd = os.open(path, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, header_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if mm[:8] != MAGIC:
            mm.close()
            raise ValueError(f"{path} does not start with a dataloaderd control block")
        u32 = memoryview(mm).cast("I")
        if u32[_VERSION // 4] != VERSION:
            version = u32[_VERSION // 4]
            u32.release()
            mm.close()
            raise ValueError(f"{path}: control block version {version}, this client reads {VERSION}")
        self._mm: Optional[mmap.mmap] = mm
        self._u64 = memoryview(mm).cast("Q")
        self._u32 = u32
        self.slots = self._u32[_SLOTS // 4]
        rec = self._u32[_CONSUMER_RECS // 4] + consumer * _CONSUMER_REC_BYTES
        self._slot_recs = self._u32[_SLOT_RECS // 4]
        self._released = (rec + _RELEASED) // 8
        self._waiting = (rec + _WAITING) // 4
        self._wait_count = (rec + _WAIT_COUNT) // 8
        self._wait_sum = (rec + _WAIT_SUM) // 8
        self._buckets = (rec + _WAIT_BUCKETS) // 4
        libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._mm))
        self._pub_seq_addr = ctypes.c_void_p(base + _PUB_SEQ)
        self._rel_seq_addr = ctypes.c_void_p(base + _REL_SEQ)
        self._base_ref = base

    def poll(self, step: int) -> Tuple[int, Optional[Tuple[int, int, int, int]]]:
        """What the block says of ``step`` now: (RUNNING, (slot, lines,
        segments, max_seqlen)) when it is
        published; (RUNNING, None) when not yet; (ENDED, None) when the
        iteration ended before it; (FAILED or CLOSED, None) otherwise."""
        # The state first: the daemon sets it after its last publish, so a
        # final state read here covers every step published below.
        state = self._u32[_STATE // 4]
        if self._u64[_PUBLISHED // 8] >= step:
            slot = (step - 1) % self.slots
            rec = self._slot_recs + _SLOT_REC_BYTES * slot
            got = self._u64[(rec + _SLOT_STEP) // 8]
            if got != step:
                raise RuntimeError(f"control block: slot {slot} holds step {got}, expected {step}")
            return RUNNING, (slot, self._u32[(rec + _SLOT_LINES) // 4], self._u32[(rec + _SLOT_SEGMENTS) // 4],
                             self._u32[(rec + _SLOT_MAX_SEQLEN) // 4])
        return state, None

    def published(self) -> int:
        """The last step the daemon announced."""
        return self._u64[_PUBLISHED // 8]

    def wait(self, step: int, timeout_s: float) -> None:
        """Sleeps until the daemon publishes or changes state, or timeout_s
        passes; returns at once when something happened since the last look."""
        seq = self._u32[_PUB_SEQ // 4]
        if self._u64[_PUBLISHED // 8] >= step or self._u32[_STATE // 4] != RUNNING:
            return
        self._u32[self._waiting] = 1
        try:
            ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
            self._syscall(_SYS_FUTEX, self._pub_seq_addr, _FUTEX_WAIT, ctypes.c_uint32(seq),
                          ctypes.byref(ts), None, 0)
        finally:
            self._u32[self._waiting] = 0

    def release(self, step: int, wait_ns: int) -> None:
        """Releases every step up to ``step`` and records the wait for it."""
        self._u64[self._wait_count] += 1
        self._u64[self._wait_sum] += wait_ns
        for i, bound in enumerate(_BUCKET_BOUNDS_NS):
            if wait_ns <= bound:
                self._u32[self._buckets + i] += 1
                break
        self._u64[self._released] = step
        if self._u32[_PROD_WAITING // 4]:
            self._u32[_REL_SEQ // 4] = (self._u32[_REL_SEQ // 4] + 1) & 0xFFFFFFFF
            self._syscall(_SYS_FUTEX, self._rel_seq_addr, _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)

    def close(self) -> None:
        """Unmaps the block. Idempotent."""
        self._u64.release()
        self._u32.release()
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a ctypes view still refers to it; the GC unmaps it
