"""The token corpora: a Megatron indexed dataset (uint16 tokens, log-normal
document lengths) and a sparse one 20 times as large, written once into the
work folder and reused while their parameters match."""
import json
import os
import time

import numpy as np

from .common import EOS, LINES, SEQ_LEN, SHARDS, VOCAB, log


def doc_lengths(rng, total_tokens):
    """Document lengths until total_tokens: log-normal (median ~660 tokens,
    mean ~1,400, a long tail clipped at 128k), as web text tokenizes."""
    out, n = [], 0
    while n < total_tokens:
        chunk = np.clip(rng.lognormal(6.5, 1.25, size=1 << 16), 8, 1 << 17).astype(np.int64)
        out.append(chunk)
        n += int(chunk.sum())
    lengths = np.concatenate(out)
    cut = int(np.searchsorted(np.cumsum(lengths), total_tokens)) + 1
    return lengths[:cut]


def write_idx(path, lengths, itemsize, dtype_code):
    """An MMIDIDX v1 index of back-to-back sequences, one document each."""
    n = len(lengths)
    pointers = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1] * itemsize, out=pointers[1:])
    with open(path, "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.uint64(1).tobytes())
        f.write(np.uint8(dtype_code).tobytes())
        f.write(np.uint64(n).tobytes())
        f.write(np.uint64(n + 1).tobytes())
        f.write(lengths.astype(np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(n + 1, dtype=np.int64).tobytes())


def write_corpus(prefix, total_tokens, seed):
    """A Megatron uint16 corpus of about total_tokens random tokens (EOS-free
    ids 1..VOCAB-1), written in chunks so memory stays small."""
    rng = np.random.default_rng(seed)
    lengths = doc_lengths(rng, total_tokens)
    total = int(lengths.sum())
    with open(prefix + ".bin", "wb") as f:
        left = total
        while left:
            n = min(left, 1 << 26)
            rng.integers(1, VOCAB, size=n, dtype=np.uint16).tofile(f)
            left -= n
    write_idx(prefix + ".idx", lengths, 2, 8)
    return lengths


def write_sparse_corpus(prefix, lengths, times):
    """A corpus `times` as large as lengths describes, whose .bin is a sparse
    file (truncate): no token byte is on disk, so only what is read costs."""
    big = np.tile(lengths, times)
    total = int(big.sum())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(total * 2)
    write_idx(prefix + ".idx", big, 2, 8)
    return total


def reuse_corpora(stamp_path, want, paths):
    """The stamp of corpora written earlier with the same parameters, or None."""
    try:
        with open(stamp_path) as f:
            have = json.load(f)
    except (OSError, ValueError):
        return None
    if have.get("params") == want and all(os.path.exists(p) for p in paths):
        return have
    return None


def prepare_corpora(workdir, total_tokens, sparse_times, seed):
    """The 1x corpus and the sparse 20x one, reused when their parameters match."""
    os.makedirs(workdir, exist_ok=True)
    stamp_path = os.path.join(workdir, "corpus.json")
    want = {"tokens": total_tokens, "seed": seed, "sparse_times": sparse_times, "format": 2}
    prefix = os.path.join(workdir, "corpus")
    sparse = os.path.join(workdir, f"corpus{sparse_times}x")
    have = reuse_corpora(stamp_path, want, [p + ext for p in (prefix, sparse) for ext in (".bin", ".idx")])
    if have is not None:
        log(f"reusing corpus in {workdir}")
        return prefix, sparse, have
    log(f"writing a {total_tokens * 2 / 1e9:.2f} GB corpus and a sparse {sparse_times}x one in {workdir}")
    t0 = time.perf_counter()
    lengths = write_corpus(prefix, total_tokens, seed)
    sparse_tokens = write_sparse_corpus(sparse, lengths, sparse_times)
    info = {"params": want, "tokens": int(lengths.sum()), "documents": len(lengths),
            "doc_len_median": float(np.median(lengths)), "doc_len_mean": float(lengths.mean()),
            "doc_len_p99": float(np.percentile(lengths, 99)),
            "bin_bytes": int(lengths.sum()) * 2, "sparse_tokens": sparse_tokens,
            "sparse_documents": len(lengths) * sparse_times, "sparse_bin_bytes": sparse_tokens * 2,
            "write_seconds": time.perf_counter() - t0}
    with open(stamp_path, "w") as f:
        json.dump(info, f, indent=1)
    return prefix, sparse, info


def job_config(prefix, shards=SHARDS):
    """The benchmark's job on a Megatron corpus: seq_len 4096, 8 lines a batch."""
    return {"seq_len": SEQ_LEN, "batch_size": LINES, "seed": 1, "logical_shards": shards, "eos_id": EOS,
            "datasets": [{"name": "bench", "path": prefix, "format": "megatron"}]}
