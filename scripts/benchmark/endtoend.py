"""The rows measured against the real daemon and client processes:
throughput to N clients, the wait inside next(), startup (time to first
batch, state save, memory), and the CPU a host pays for its loader."""
import os
import shutil
import statistics
import time

from .clients import run_clients
from .common import log, median
from .corpus import job_config
from .daemon import daemon


# Every metadata field: the rows with document metadata on.
METADATA = ("position_ids", "document_ids", "cu_seqlens", "loss_mask", "dataset_ids")


def rate_run(d, prefix, transport, n, seconds, job, metadata=(), dtype=None):
    """tokens/s summed over n clients in one run; with metadata, batches
    carry those fields and the clients copy them too; dtype None is the
    Loader's default."""
    config = dict(job_config(prefix), metadata=list(metadata))
    specs = [{"config": config, "rank": i, "size": n, "socket": d.socket, "transport": transport,
              "job": job, "mode": "rate", "seconds": seconds, "dtype": dtype} for i in range(n)]
    return sum(x["tokens"] / x["seconds"] for x in run_clients(specs))


def rate_runs(d, prefix, transport, n, seconds, repeats, job, metadata=()):
    """rate_run once per repeat: its samples."""
    samples = [rate_run(d, prefix, transport, n, seconds, f"{job}-{r}", metadata) for r in range(repeats)]
    log(f"{transport} x{n}{' with metadata' if metadata else ''}: {statistics.median(samples):,.0f} tokens/s")
    return samples


def dtype_runs(d, prefix, seconds, repeats):
    """One shm client with the default dtype (int64 keys) and with
    dtype="int32" (zero-copy views), alternating run by run on one daemon so
    that both see the same machine: the rows e2e_shm_1 and e2e_shm_int32_1."""
    rows = {"e2e_shm_1": [], "e2e_shm_int32_1": []}
    for r in range(repeats):
        rows["e2e_shm_1"].append(rate_run(d, prefix, "shm", 1, seconds, f"rate-shm-1-{r}"))
        rows["e2e_shm_int32_1"].append(rate_run(d, prefix, "shm", 1, seconds, f"rate-shm-int32-{r}", dtype="int32"))
    log(f"shm x1: {statistics.median(rows['e2e_shm_1']):,.0f} tokens/s (default dtype), "
        f"{statistics.median(rows['e2e_shm_int32_1']):,.0f} (int32)")
    return rows


def wait_runs(d, prefix, transport, repeats, wait_batches, job):
    """p50 and p99 of next() with the daemon ahead, one client."""
    p50, p99 = [], []
    for r in range(repeats):
        spec = {"config": job_config(prefix), "rank": 0, "size": 1, "socket": d.socket, "transport": transport,
                "job": f"{job}-{r}", "mode": "wait", "head_start": 1.0, "batches": wait_batches,
                "step_seconds": 0.005}
        res = run_clients([spec])[0]
        p50.append(res["p50_us"])
        p99.append(res["p99_us"])
    log(f"{transport} wait: p50 {statistics.median(p50):.0f} us, p99 {statistics.median(p99):.0f} us")
    return {f"wait_{transport}_p50": p50, f"wait_{transport}_p99": p99}


def end_to_end(binary, tmp, prefix, clients, transports, seconds, repeats, wait_batches):
    """tokens/s for each (transport, n clients), the wait inside next(), and
    the daemon's peak RSS after it all (one daemon, a fresh session per run)."""
    rows = {}
    with daemon(binary, tmp, "e2e") as d:
        for transport in transports:
            for n in clients:
                if transport == "shm" and n == 1:
                    rows.update(dtype_runs(d, prefix, seconds, repeats))
                else:
                    rows[f"e2e_{transport}_{n}"] = rate_runs(d, prefix, transport, n, seconds, repeats,
                                                             f"rate-{transport}-{n}")
                if transport == "shm" and n == 1:
                    rows["e2e_shm_meta_1"] = rate_runs(d, prefix, transport, n, seconds, repeats, "rate-shm-meta",
                                                       METADATA)
            rows.update(wait_runs(d, prefix, transport, repeats, wait_batches, f"wait-{transport}"))
        rows["rss_e2e"] = [d.status_kib("VmHWM") * 1024]
        rows["anon_e2e"] = [d.status_kib("RssAnon") * 1024]
    return rows


def save_loop(loader, it, tmp, label, r, save_repeats):
    """save_repeats saves at different steps: (seconds, bytes) of each."""
    out = []
    for s in range(save_repeats):
        next(it)
        folder = os.path.join(tmp, f"ckpt-{label}-{r}-{s}")
        t1 = time.perf_counter()
        loader.save(folder)
        seconds = time.perf_counter() - t1
        files = [os.path.join(dp, f) for dp, _, fs in os.walk(folder) for f in fs]
        out.append((seconds, sum(os.path.getsize(f) for f in files)))
        shutil.rmtree(folder)
    return out


def startup(binary, tmp, prefix, label, repeats, save_repeats):
    """Time to first batch with a fresh daemon, state save time and size, the
    daemon's peak RSS; one fresh daemon per repeat."""
    from dataloaderd import Loader
    ttfb, saves, sizes, daemon_saves, rss, anon = [], [], [], [], [], []
    for r in range(repeats):
        with daemon(binary, tmp, f"start-{label}-{r}") as d:
            t0 = time.perf_counter()
            loader = Loader(job_config(prefix), dp_rank=0, dp_size=1, socket=d.socket, transport="shm",
                            job=f"start{r}")
            with loader:
                it = iter(loader)
                next(it)
                ttfb.append(time.perf_counter() - t0)
                for _ in range(16):
                    next(it)
                for seconds, size in save_loop(loader, it, tmp, label, r, save_repeats):
                    saves.append(seconds)
                    sizes.append(size)
                m = d.metrics()
                count = m.get("dataloaderd_state_save_seconds_count", 0)
                if count:
                    daemon_saves.append(m["dataloaderd_state_save_seconds_sum"] / count)
                anon.append(d.status_kib("RssAnon") * 1024)
            rss.append(d.status_kib("VmHWM") * 1024)
    out = {f"ttfb_{label}": ttfb, f"rss_{label}": rss, f"anon_{label}": anon}
    if label == "1x":
        out.update({"save_client": saves, "save_daemon": daemon_saves, "state_bytes": sizes})
    return out


def cpu_run(d, prefix, ranks, spec, job):
    """One run of `ranks` shm clients in spec's mode (rate or paced), with the
    daemon's CPU time read just before the clients start their windows and
    just after the last one reported (the sessions still open)."""
    marks = {}

    def mark(name):
        marks[name] = (time.perf_counter(), d.cpu_seconds())

    specs = [dict(spec, config=job_config(prefix), rank=i, size=ranks, socket=d.socket, transport="shm", job=job)
             for i in range(ranks)]
    res = run_clients(specs, before_go=lambda: mark("go"), before_close=lambda: mark("end"))
    wall = marks["end"][0] - marks["go"][0]
    tokens = sum(x["tokens"] for x in res)
    return {"tokens": tokens, "wall_s": wall, "daemon_cpu_s": marks["end"][1] - marks["go"][1],
            "clients_cpu_s": sum(x["cpu_s"] for x in res),
            "interval_s": statistics.mean(x.get("interval_s", 0.0) for x in res),
            "interval_max_s": max(x.get("interval_max_s", 0.0) for x in res),
            "tokens_per_s": sum(x["tokens"] / x["seconds"] for x in res)}


def cpu_rows(runs, mode):
    """The rows of one mode from its runs: CPU-seconds per 1e9 tokens served."""
    def per_g(cpu, run):
        return cpu / run["tokens"] * 1e9 if run["tokens"] else None

    rows = {f"cpu_daemon_{mode}": [per_g(r["daemon_cpu_s"], r) for r in runs],
            f"cpu_clients_{mode}": [per_g(r["clients_cpu_s"], r) for r in runs],
            f"cpu_total_{mode}": [per_g(r["daemon_cpu_s"] + r["clients_cpu_s"], r) for r in runs]}
    if mode == "paced":
        rows["interval_paced"] = [r["interval_s"] for r in runs]
        rows["cores_paced"] = [(r["daemon_cpu_s"] + r["clients_cpu_s"]) / r["wall_s"] for r in runs]
    return {k: [x for x in v if x is not None] for k, v in rows.items()}


def cpu_cost(binary, tmp, prefix, ranks, interval, paced_seconds, full_seconds, repeats):
    """What a host pays for its loader: daemon and client CPU per 1e9 tokens
    for `ranks` shm clients taking a batch every `interval` seconds (a
    trainer's pace) and at full speed. A fresh daemon per repeat; the two
    modes alternate within it."""
    runs = {"paced": [], "full": []}
    for r in range(repeats):
        with daemon(binary, tmp, f"cpu-{r}") as d:
            runs["paced"].append(cpu_run(d, prefix, ranks, {"mode": "paced", "interval": interval,
                                                            "seconds": paced_seconds}, f"cpu-paced-{r}"))
            runs["full"].append(cpu_run(d, prefix, ranks, {"mode": "rate", "seconds": full_seconds},
                                        f"cpu-full-{r}"))
    rows = {**cpu_rows(runs["paced"], "paced"), **cpu_rows(runs["full"], "full")}
    log(f"CPU per 1e9 tokens, {ranks} ranks: paced {median(rows['cpu_total_paced']):,.1f} s "
        f"(a batch every {median(rows['interval_paced']) * 1e3:.1f} ms), full speed "
        f"{median(rows['cpu_total_full']):,.1f} s")
    info = {"ranks": ranks, "interval_s": interval, "paced_seconds": paced_seconds, "full_seconds": full_seconds,
            "transport": "shm", "daemon_cpu": "/proc/<pid>/stat utime + stime, read before the windows start "
            "and after the last client reported", "client_cpu": "getrusage(RUSAGE_SELF) over each window",
            "runs": runs}
    return rows, info
