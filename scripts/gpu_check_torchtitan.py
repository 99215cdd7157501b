"""torchtitan's own Trainer on a GPU, fed by dataloaderd through
dataloaderd.trainers.torchtitan (the part tests_torch/test_trainer_torchtitan.py
cannot run on a CPU): torchtitan.train under torchrun (1 GPU) trains its
llama3 debug model, its vocabulary set to the corpus's, on a unique-token
corpus served by the daemon; CheckpointManager saves at step 10; the job is
killed (-9) at step 13 and started again with the same command, which
CheckpointManager.load resumes from step 10. Checked: every token of the
epoch reaches the trainer exactly once, the resumed run starts at step 11,
every logged loss is finite, and the data ends with torchtitan's "Ran out of
data" and exit 0.

    python scripts/gpu_check_torchtitan.py --daemon bin/dataloaderd [--attn varlen|flex] [--keep DIR]

Needs torch with CUDA, torchtitan 0.3.0 and what it imports when it trains
(docs/trainers.md, "torchtitan"), the client's grpcio, protobuf and numpy,
and the daemon binary; no network, no tokenizer file (the daemon serves
token ids; DaemonTokenizer gives torchtitan the vocabulary size).
Exit status: 0 passed, 1 a check failed, 2 this machine cannot run it.
"""
import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "clients", "python", "src")
sys.path.insert(0, CLIENT)
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "tests"))  # corpus.py: unique-token corpora

VOCAB_ENV, ATTN_ENV = "GPU_CHECK_TITAN_VOCAB", "GPU_CHECK_TITAN_ATTN"
SAVE_EVERY, HANG_AT = 10, 13  # a checkpoint at step 10; killed while waiting for step 14's batch


def dataloaderd_debugmodel() -> Any:
    """The trainer config, a config_registry function (--module
    gpu_check_torchtitan --config dataloaderd_debugmodel): torchtitan's
    llama3_debugmodel with the vocabulary of $GPU_CHECK_TITAN_VOCAB, the
    adapter (recording what it yields) and DaemonTokenizer."""
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import TrainingConfig
    from torchtitan.models.llama3 import model_registry
    from torchtitan.trainer import Trainer

    from dataloaderd.trainers.torchtitan import DaemonTokenizer

    vocab, attn = int(os.environ[VOCAB_ENV]), os.environ.get(ATTN_ENV, "varlen")
    spec = model_registry("debugmodel", attn_backend=attn)
    spec.model.vocab_size = spec.model.tok_embeddings.num_embeddings = spec.model.lm_head.out_features = vocab
    return Trainer.Config(
        model_spec=spec,
        hf_assets_path=".",
        tokenizer=DaemonTokenizer.Config(vocab_size=vocab),
        dataloader=recording_dataloader().Config(),
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=vocab)),
        optimizer=default_adamw(lr=8e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8, decay_type="linear",
                                                  min_lr_factor=0.0),
        training=TrainingConfig(local_batch_size=8, seq_len=128, steps=1000, disable_cuda_graphs=attn == "varlen"),
        metrics=MetricsProcessor.Config(log_freq=1, disable_color_printing=True),
        checkpoint=CheckpointManager.Config(enable=True, interval=SAVE_EVERY, last_save_model_only=False),
    )


def recording_dataloader() -> Any:
    """The adapter, writing what it yields to <records>/rank-<r>-of-<W>.jsonl
    (step, tokens carried) and, after step hang_at, waiting to be killed."""
    from dataclasses import dataclass

    from dataloaderd.trainers.torchtitan import DataloaderdDataLoader

    class Recording(DataloaderdDataLoader):
        @dataclass(kw_only=True, slots=True)
        class Config(DataloaderdDataLoader.Config):
            records: str = ""
            hang_at: int = 0

        def __init__(self, config: Any, **kwargs: Any):
            super().__init__(config, **kwargs)
            self.records, self.hang_at = config.records, config.hang_at

        def __iter__(self) -> Iterator[Tuple[Dict[str, Any], Any]]:
            path = os.path.join(self.records, f"rank-{self.dp_rank}-of-{self.dp_world_size}.jsonl")
            with open(path, "a") as log:
                for inputs, labels in super().__iter__():
                    step = self.loader.step
                    rows, lasts = inputs["input"].tolist(), labels[:, -1].tolist()  # a line's last token is no input
                    tokens = [t for row, last in zip(rows, lasts) for t in row + [last]]
                    log.write(json.dumps({"step": step, "tokens": [t for t in tokens if t >= 0]}) + "\n")
                    log.flush()
                    yield inputs, labels
                    if step == self.hang_at:
                        time.sleep(600)

    return Recording


# ---- the check, outside torchrun ------------------------------------------------


def need(args: argparse.Namespace) -> None:
    """Exits 2 unless this machine has what the check needs."""
    try:
        import torch
    except ImportError:
        _cannot("no torch here")
    if not torch.cuda.is_available():
        _cannot("torch sees no CUDA GPU")
    try:
        import torchtitan.train  # noqa: F401 - what the ranks run
        from importlib.metadata import version
        found = version("torchtitan")
    except Exception as e:  # ImportError of torchtitan or of one of its run-time dependencies
        _cannot(f"torchtitan cannot be imported ({type(e).__name__}: {e}); install torchtitan==0.3.0 and what it "
                "imports when it trains (docs/trainers.md, 'torchtitan': torchdata, tyro, spmd_types, tokenizers, "
                "datasets, safetensors, ...), e.g. from wheels carried here with pip install --no-index")
    if found != "0.3.0":
        print(f"gpu_check_torchtitan: torchtitan {found} here; the adapter is tested with 0.3.0", flush=True)
    if not os.access(args.daemon, os.X_OK):
        _cannot(f"no daemon binary at {args.daemon}: build it with 'CGO_ENABLED=0 go build -o bin/dataloaderd "
                "./cmd/dataloaderd' and carry it here")


def _cannot(why: str) -> None:
    print(f"gpu_check_torchtitan: {why}", file=sys.stderr, flush=True)
    sys.exit(2)


def start_daemon(binary: str, tmp: str) -> Tuple[subprocess.Popen[bytes], str]:
    sock = os.path.join(tmp, "d.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w")
    proc = subprocess.Popen([binary, "serve", "--socket", sock, "--log-level", "warn"], stdout=log,
                            stderr=subprocess.STDOUT)
    for _ in range(200):
        if subprocess.run([binary, "healthcheck", "--socket", sock, "--timeout", "1s"],
                          capture_output=True).returncode == 0:
            return proc, sock
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the daemon did not start: see {tmp}/daemon.log")


def launch(tmp: str, name: str, job: str, sock: str, vocab: int, attn: str, hang_at: int) -> subprocess.Popen[bytes]:
    """torchtitan.train under torchrun on one GPU, as its users start it."""
    records = os.path.join(tmp, f"log-{name}")
    os.makedirs(records, exist_ok=True)
    env = dict(os.environ, DATALOADERD_SOCKET=sock, **{VOCAB_ENV: str(vocab), ATTN_ENV: attn},
               PYTHONPATH=os.pathsep.join([HERE, CLIENT, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           "-m", "torchtitan.train", "--module", "gpu_check_torchtitan", "--config", "dataloaderd_debugmodel",
           "--dataloader.job_config", job, "--dataloader.records", records, "--dataloader.hang_at", str(hang_at),
           "--dump_folder", tmp]
    out = open(os.path.join(tmp, f"{name}.out"), "w")
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def records(tmp: str, name: str) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    folder = os.path.join(tmp, f"log-{name}")
    for f in sorted(os.listdir(folder)):
        with open(os.path.join(folder, f)) as lines:
            out += [json.loads(line) for line in lines]
    return out


def saved_step(tmp: str) -> int:
    """The step CheckpointManager.load resumes from: the highest step-<s>
    folder with DCP's .metadata (its _find_load_step)."""
    folder = os.path.join(tmp, "checkpoint")
    steps = [int(m.group(1)) for d in (os.listdir(folder) if os.path.isdir(folder) else [])
             if (m := re.fullmatch(r"step-(\d+)", d)) and os.path.isfile(os.path.join(folder, d, ".metadata"))]
    return max(steps, default=0)


def kill_after_checkpoint(tmp: str, proc: subprocess.Popen[bytes], timeout: float) -> int:
    """kill -9 of the job once it has saved step SAVE_EVERY and trained to HANG_AT."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the first run exited ({proc.returncode}) before it was killed: see {tmp}/a.out")
        if saved_step(tmp) >= SAVE_EVERY and max((r["step"] for r in records(tmp, "a")), default=0) >= HANG_AT:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return saved_step(tmp)
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"no checkpoint at step {SAVE_EVERY} and step {HANG_AT} within {timeout:g} s: see {tmp}/a.out")


def losses(tmp: str, name: str) -> List[float]:
    with open(os.path.join(tmp, f"{name}.out")) as f:
        return [float(v) for v in re.findall(r"step:\s*\d+\s+loss:\s*(\S+)", f.read())]


def check(ok: bool, what: str, failures: List[str]) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", default=os.environ.get("DATALOADERD_BIN", "bin/dataloaderd"))
    ap.add_argument("--attn", choices=["varlen", "flex"], default="varlen",
                    help="torchtitan's attention: varlen (no compile) or flex (compiled by triton: needs a C compiler)")
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=240, help="seconds each run may take")
    args = ap.parse_args()
    need(args)
    from corpus import make_corpus

    tmp = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="gpu-check-titan-")
    os.makedirs(tmp, exist_ok=True)
    datasets, ranges = make_corpus(tmp, sizes=((300, 120), (200, 80)))
    tokens = {t for lo, hi in ranges for t in range(lo, hi)}
    job = os.path.join(tmp, "job.json")
    with open(job, "w") as f:
        json.dump({"seq_len": 128, "batch_size": 8, "seed": 3, "logical_shards": 8, "eos_id": 0, "epochs": 1,
                   "metadata": ["position_ids", "loss_mask"], "datasets": datasets}, f)
    vocab = max(tokens) + 1
    print(f"torchtitan debug model, vocabulary {vocab}, attention {args.attn}, {len(tokens)} tokens; in {tmp}", flush=True)
    daemon, sock = start_daemon(args.daemon, tmp)
    failures: List[str] = []
    try:
        first = launch(tmp, "a", job, sock, vocab, args.attn, HANG_AT)
        saved = kill_after_checkpoint(tmp, first, args.timeout)
        second = launch(tmp, "b", job, sock, vocab, args.attn, 0)
        code = second.wait(timeout=args.timeout)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    out = open(os.path.join(tmp, "b.out")).read()
    check(code == 0, f"the resumed run exits 0 (got {code}; {tmp}/b.out)", failures)
    check(saved == SAVE_EVERY, f"killed after the checkpoint of step {SAVE_EVERY} (CheckpointManager's latest: {saved})",
          failures)
    after = records(tmp, "b")
    check(bool(after) and min(r["step"] for r in after) == saved + 1,
          f"CheckpointManager.load resumed the data at step {saved + 1}", failures)
    check("Ran out of data" in out, "the data ended with torchtitan's DataloaderExhaustedError", failures)
    served = [t for r in records(tmp, "a") if r["step"] <= saved for t in r["tokens"]]
    served += [t for r in after for t in r["tokens"]]
    data = [t for t in served if t != 0]
    check(len(data) == len(set(data)), f"no token served twice ({len(data) - len(set(data))} were)", failures)
    check(set(data) == tokens, f"every token served ({len(tokens - set(data))} of {len(tokens)} missing)", failures)
    logged = losses(tmp, "a") + losses(tmp, "b")
    check(len(logged) >= 20 and all(math.isfinite(v) for v in logged),
          f"{len(logged)} steps logged a loss, every one finite (first {logged[:1]}, last {logged[-1:]})", failures)
    if failures:
        print(f"gpu_check_torchtitan: {len(failures)} check(s) failed; outputs in {tmp}", flush=True)
        sys.exit(1)
    print("gpu_check_torchtitan: passed", flush=True)


if __name__ == "__main__":
    main()
