"""The text corpus of the on-the-fly rows: a JSONL file ({"text": ...} a
line) made from the text on this machine (Go and Python sources, man pages,
package docs, message catalogs), a sample of its documents for the
tokenizer's own rate, and gzip copies of it; all reused while unchanged."""
import gettext
import glob
import gzip
import json
import os
import random
import shutil
import subprocess
import sysconfig
import time

from .common import REPO, log

TEXT_DOC_MAX = 64 << 10  # longer files are cut at a newline into documents of at most this
# The mix of the generated JSONL corpus, by bytes: source code, manual pages,
# package documentation (copyright notices, changelogs, READMEs) and the
# translated message catalogs of every installed language.
TEXT_KINDS = (("go", 0.35), ("python", 0.20), ("man", 0.20), ("doc", 0.10), ("catalogs", 0.15))
# BenchmarkEncode encodes the documents of these kinds; for the sample of the
# JSONL corpus the kind is only a label.
SAMPLE_KIND = {"go": "go", "python": "python", "man": "man", "doc": "man", "catalogs": "catalogs"}
MAX_PASSES = 50  # over the sources, when they hold less text than the corpus asks for


def split_doc(text, limit=TEXT_DOC_MAX):
    """Cuts text at newlines into pieces of at most about limit characters."""
    start = 0
    while len(text) - start > limit:
        cut = text.rfind("\n", start + limit // 2, start + limit)
        cut = start + limit if cut < 0 else cut + 1
        yield text[start:cut]
        start = cut
    if text[start:].strip():
        yield text[start:]


def read_file(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read(8 << 20)
    with open(path, "rb") as f:
        return f.read(8 << 20)


def read_catalog(path):
    """The translated strings of a gettext .mo catalog, one a line."""
    with open(path, "rb") as f:
        cat = gettext.GNUTranslations(f)._catalog
    return "\n".join(v for k, v in sorted(cat.items(), key=lambda kv: str(kv[0]))
                     if isinstance(v, str) and v).encode("utf-8", "surrogatepass")


def text_sources():
    """{kind: (paths, reader)} of the text on this machine."""
    goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True).stdout.strip()
    stdlib = sysconfig.get_paths()["stdlib"]
    py = [p for p in glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)
          if "site-packages" not in p and "dist-packages" not in p]
    docs = [p for p in glob.glob("/usr/share/doc/**/*", recursive=True)
            if os.path.isfile(p) and os.path.getsize(p) < (4 << 20)]
    return {
        "go": (glob.glob(os.path.join(goroot, "src", "**", "*.go"), recursive=True), read_file),
        "python": (py, read_file),
        "man": (glob.glob("/usr/share/man/**/*.gz", recursive=True), read_file),
        "doc": (docs, read_file),
        "catalogs": (glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"), read_catalog),
    }


def kind_docs(paths, reader):
    """The documents of one kind: every readable UTF-8 text file, cut to TEXT_DOC_MAX."""
    for p in paths:
        try:
            b = reader(p)
            if not b or b"\x00" in b:
                continue
            t = b.decode("utf-8")
        except Exception:  # unreadable, not UTF-8, not a catalog
            continue
        yield from split_doc(t)


def mixed_lines(seed, tally):
    """(kind, document, JSONL line) in the order of the mix: next from the
    kind furthest below its share of the bytes so far. Where a kind runs out
    the others fill; when all have, the sources are read again (up to
    MAX_PASSES times). tally counts bytes, documents and passes by kind."""
    sources = text_sources()
    weights = dict(TEXT_KINDS)
    rng = random.Random(seed)
    order = {}
    for kind, _ in TEXT_KINDS:
        order[kind] = sorted(sources[kind][0])
        rng.shuffle(order[kind])
    gens = {}
    while True:
        if not gens:
            tally["passes"] += 1
            gens = {k: kind_docs(order[k], sources[k][1]) for k in weights if order[k]}
            if tally["passes"] > MAX_PASSES or not gens:
                return
        kind = min(gens, key=lambda k: tally["bytes"][k] / weights[k])
        try:
            doc = next(gens[kind])
        except StopIteration:
            del gens[kind]
            continue
        line = (json.dumps({"text": doc}, ensure_ascii=False) + "\n").encode("utf-8")
        tally["bytes"][kind] += len(line)
        tally["documents"][kind] += 1
        yield kind, doc, line


def write_text_jsonl(path, sample_dir, total_bytes, sample_bytes, seed):
    """Writes the JSONL corpus and its sample; returns the tally and the sample."""
    tally = {"passes": 0, "bytes": {k: 0 for k, _ in TEXT_KINDS}, "documents": {k: 0 for k, _ in TEXT_KINDS}}
    srng = random.Random(seed + 1)
    frac, total, sample = sample_bytes / total_bytes, 0, []
    if os.path.exists(sample_dir):
        shutil.rmtree(sample_dir)
    os.makedirs(os.path.join(sample_dir, "docs"))
    with open(path + ".tmp", "wb") as out:
        for kind, doc, line in mixed_lines(seed, tally):
            out.write(line)
            total += len(line)
            if srng.random() < frac:
                name = f"{len(sample):05d}-{kind}.txt"
                with open(os.path.join(sample_dir, "docs", name), "wb") as f:
                    f.write(doc.encode("utf-8"))
                sample.append({"file": name, "kind": SAMPLE_KIND[kind], "valid": True})
            if total >= total_bytes:
                break
    os.replace(path + ".tmp", path)
    with open(os.path.join(sample_dir, "sample.json"), "w") as f:
        json.dump(sample, f)
    return tally, sample


def prepare_text_corpus(workdir, total_bytes, sample_bytes, seed):
    """A JSONL corpus of about total_bytes made from the text on this machine,
    and a sample of its documents (about sample_bytes, drawn evenly) as files
    for BenchmarkEncode; reused when the parameters match."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "text.jsonl")
    sample_dir = os.path.join(workdir, "text-sample")
    stamp_path = os.path.join(workdir, "text.json")
    want = {"bytes": total_bytes, "sample_bytes": sample_bytes, "seed": seed, "kinds": TEXT_KINDS,
            "doc_max": TEXT_DOC_MAX, "format": 1}
    try:
        with open(stamp_path) as f:
            have = json.load(f)
        if json.loads(json.dumps(want)) == have["params"] and os.path.exists(path) and \
                os.path.exists(os.path.join(sample_dir, "sample.json")):
            log(f"reusing text corpus {path}")
            return path, sample_dir, have
    except (OSError, ValueError, KeyError):
        pass
    log(f"writing a {total_bytes / 1e6:.0f} MB JSONL text corpus in {workdir}")
    t0 = time.perf_counter()
    tally, sample = write_text_jsonl(path, sample_dir, total_bytes, sample_bytes, seed)
    info = {"params": want, "path": os.path.relpath(path, REPO), "bytes": sum(tally["bytes"].values()),
            "documents": sum(tally["documents"].values()), "bytes_by_kind": tally["bytes"],
            "documents_by_kind": tally["documents"], "passes_over_sources": tally["passes"],
            "sample_documents": len(sample),
            "sample_bytes": sum(os.path.getsize(os.path.join(sample_dir, "docs", d["file"])) for d in sample),
            "write_seconds": time.perf_counter() - t0}
    with open(stamp_path, "w") as f:
        json.dump(info, f, indent=1)
    return path, sample_dir, info


def gzip_text_corpus(jsonl, files):
    """The JSONL corpus cut into `files` gzip files of consecutive lines (level
    6), in a folder beside it; reused while the corpus is unchanged."""
    folder = f"{jsonl}.gz{files}"
    stamp = os.path.join(folder, "stamp.json")
    want = {"source_bytes": os.path.getsize(jsonl), "source_mtime_ns": os.stat(jsonl).st_mtime_ns, "files": files}
    try:
        with open(stamp) as f:
            if json.load(f) == want:
                return folder
    except (OSError, ValueError):
        pass
    log(f"writing {jsonl} as {files} gzip file(s) in {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(jsonl, "rb") as f:
        lines = f.readlines()
    per = -(-len(lines) // files)
    for i in range(files):
        with gzip.open(os.path.join(folder, f"part-{i:03d}.jsonl.gz"), "wb", compresslevel=6) as out:
            out.writelines(lines[i * per:(i + 1) * per])
    with open(stamp, "w") as f:
        json.dump(want, f)
    return folder

