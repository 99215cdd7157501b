"""The issue's targets: for one run's rows, what was measured against each
and whether it is met (None: not measured in that run)."""

TOK_ENCODINGS = ("r50k_base", "cl100k_base", "o200k_base")
IBM_TOKENS_PER_WORKER = 90_000  # IBM's published per-worker rate of its data loader
PEER_KEYS = ("peer_torch", "peer_stateful", "peer_streaming")


class Rows:
    """A run's rows by key; median and ratio are None where not measured."""

    def __init__(self, rows):
        self.r = {row["key"]: row for row in rows}

    def med(self, key):
        return self.r.get(key, {}).get("median")

    def ratio(self, key):
        return self.r.get(key, {}).get("ratio")


def pipeline(rows):
    rank, ring = rows.ratio("go_rank"), rows.ratio("go_pipeline")
    if not (rank and ring):
        return "not measured", None
    return f"{rank:.3f}x Go copy into a buffer; {ring:.3f}x into the 8-slot ring", rank >= 0.5


def fault_guard(rows):
    r = rows.med("go_guard_ratio")
    if not r:
        return "not measured", None
    return f"guarded / unguarded pipeline = {r:.3f}", r >= 0.97


def metadata(rows):
    go, shm = rows.ratio("go_pipeline_meta"), rows.ratio("e2e_shm_meta_1")
    if not (go and shm):
        return "not measured", None
    return f"Go pipeline {go:.3f}x, shm x1 {shm:.3f}x tokens only", go >= 0.8 and shm >= 0.8


def end_to_end(rows):
    e2e = rows.ratio("e2e_shm_1")
    return (f"{e2e:.3f}x numpy copy", e2e >= 0.3) if e2e else ("not measured", None)


def default_dtype(rows):
    default, int32 = rows.med("e2e_shm_1"), rows.med("e2e_shm_int32_1")
    if not (default and int32):
        return "not measured", None
    return f"default / int32 = {default / int32:.3f} ({default / 1e6:,.0f} M of {int32 / 1e6:,.0f} M tokens/s)", \
        default >= 0.8 * int32


def peers(rows):
    shm = rows.med("e2e_shm_1")
    if not shm:
        return "not measured", None
    text = f"{shm / IBM_TOKENS_PER_WORKER:,.0f}x 90,000 tokens/s"
    found = [(rows.r[k]["label"], rows.ratio(k)) for k in PEER_KEYS if rows.ratio(k) is not None]
    if not found:
        return text + "; peers not run", None
    fastest = max(found, key=lambda p: p[1])
    text += f"; the fastest peer ({fastest[0]}) at {fastest[1]:.3f}x dataloaderd shm x1"
    return text, shm >= 1000 * IBM_TOKENS_PER_WORKER and all(x < 1 for _, x in found)


def wait(rows):
    p99, p99i = rows.med("wait_shm_p99"), rows.med("wait_inline_p99")
    if not (p99 and p99i):
        return "not measured", None
    return f"shm {p99:,.0f} µs ({p99 / 50:.1f}x the bound); inline {p99i:,.0f} µs ({p99i / 50:.1f}x)", p99 < 50


def first_batch(rows):
    t20 = rows.ratio("ttfb_20x")
    return (f"20x / 1x = {t20:.3f}", t20 <= 1.2) if t20 else ("not measured", None)


def state_save(rows):
    sc, sd, sb = rows.med("save_client"), rows.med("save_daemon"), rows.med("state_bytes")
    if not (sc and sd and sb):
        return "not measured", None
    return (f"save {sc * 1e3:.1f} ms (client, {sc / 0.010:.2f}x the bound), {sd * 1e3:.1f} ms (daemon); "
            f"state {sb / 1024:.1f} KiB ({sb / 65536:.3f}x the bound)", sc < 0.010 and sd < 0.010 and sb < 65536)


def memory(rows):
    a1, a20, h1, h20 = (rows.med(k) for k in ("anon_1x", "anon_20x", "rss_1x", "rss_20x"))
    if not (a1 and a20 and h1 and h20):
        return "not measured", None
    return (f"RssAnon 20x / 1x = {a20 / a1:.3f}; VmHWM (with mapped corpus pages) 20x / 1x = {h20 / h1:.3f}",
            a20 / a1 <= 1.2)


def tokenizer(rows):
    toks = [(e, rows.ratio(f"tok_go_{e}")) for e in TOK_ENCODINGS if rows.ratio(f"tok_go_{e}")]
    if not toks:
        return "not measured", None
    return ", ".join(f"{e} {x:.2f}x" for e, x in toks), all(x >= 1.0 for _, x in toks)


TARGETS = [
    ("Go pipeline alone >= 0.5x memory copy per core", pipeline),
    ("fault guard on mapped memory costs <= 3% of the Go pipeline", fault_guard),
    ("end to end to one client on shm >= 0.3x memory copy", end_to_end),
    ("the default dtype (int64 keys) within 20% of dtype=int32, one shm client", default_dtype),
    ("document metadata on >= 0.8x tokens only (Go pipeline, shm x1)", metadata),
    (">= 1000x IBM's ~90,000 tokens/s per worker and ahead of every peer in the same run", peers),
    ("p99 client wait < 50 µs when the daemon is ahead", wait),
    ("time to first batch within 20% at 1x and 20x corpus size", first_batch),
    ("state save < 10 ms and state < 64 KiB per rank at 1024 logical shards", state_save),
    ("daemon RSS not growing with corpus size (20x corpus: RssAnon within 20% of 1x)", memory),
    ("tokenizer >= 1.0x tiktoken per core", tokenizer),
]


def targets(rows):
    """[{target, measured, met}] for one run's rows."""
    r = Rows(rows)
    out = []
    for target, judge in TARGETS:
        measured, met = judge(r)
        out.append({"target": target, "measured": measured, "met": met})
    return out
