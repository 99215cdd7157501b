"""The loaders users would otherwise pick, run by scripts/bench_peers.py in
the benchmark's own environment (bench/.venv: torch, torchdata, Mosaic
Streaming), on the same corpus and geometry."""
import json
import os
import subprocess
import sys

from .common import LINES, SCRIPTS, SEQ_LEN, log


def peers(peers_python, prefix, mds_dir, args):
    """Runs scripts/bench_peers.py in the peers' environment: (rows, info);
    ({}, {"skipped": why}) when that environment is absent."""
    if not peers_python or not os.path.exists(peers_python):
        log(f"peers skipped: no environment at {peers_python} (make bench creates it)")
        return {}, {"skipped": f"no peers environment at {peers_python}"}
    cmd = [peers_python, os.path.join(SCRIPTS, "bench_peers.py"), "--prefix", prefix, "--mds", mds_dir,
           "--seconds", str(args.seconds), "--repeats", str(args.repeats), "--workers", str(args.peer_workers),
           "--seq-len", str(SEQ_LEN), "--batch", str(LINES), "--cpu-ranks", str(args.cpu_ranks),
           "--interval", str(args.interval), "--paced-seconds", str(args.paced_seconds)]
    log("peers: " + " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"bench_peers.py exited {out.returncode}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["rows"], res["info"]
