#!/usr/bin/env python3
"""Builds the tokenizer conformance set: a few MB of varied text made from files on this
machine (Go and Python sources, man pages, translated message catalogs, Unicode sweeps,
synthetic whitespace/digit/emoji/CRLF mixes, invalid UTF-8), and the token ids the reference
implementations give for it. internal/tokenize's TestConformance compares against them.

References: tiktoken (encode_ordinary; _encode_bytes for bytes that are not UTF-8; encode with
all special tokens allowed) and Hugging Face tokenizers (encode without added BOS/EOS, special
tokens as plain text unless recognised on purpose; raw bytes are given as Python would decode
them, with errors="replace").

Usage: scripts/tokenizer_conformance.py --vocab DIR --out DIR [--goroot DIR]
"""
import argparse
import glob
import gettext
import gzip
import json
import os
import random
import shutil
import struct
import sys
import sysconfig

import tiktoken
import tiktoken_ext.openai_public as openai_public
import tokenizers
from tiktoken.load import load_tiktoken_bpe

CHUNK = 32 * 1024
ENCODINGS = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]
SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>", "<|im_start|>", "<|begin_of_text|>",
            "<think>", "<|eot_id|>"]


def chunks(data, size=CHUNK):
    """Cuts bytes into pieces of about size at newlines (so valid UTF-8 stays valid)."""
    out, start = [], 0
    while start < len(data):
        end = data.find(b"\n", start + size)
        end = len(data) if end < 0 else end + 1
        out.append(data[start:end])
        start = end
    return out


def files_text(paths, budget, read=lambda p: open(p, "rb").read()):
    buf = bytearray()
    for p in paths:
        try:
            buf += read(p)
        except (OSError, EOFError):
            continue
        if len(buf) >= budget:
            break
    return bytes(buf[:budget]).rsplit(b"\n", 1)[0] + b"\n"


def spread(paths, n):
    """Every k-th path of a sorted list, for variety without reading everything."""
    paths = sorted(paths)
    step = max(1, len(paths) // n)
    return paths[::step]


def catalogs(budget):
    buf = bytearray()
    langs = ["ja", "zh_CN", "zh_TW", "ko", "ru", "uk", "ar", "he", "fa", "hi", "bn", "ta", "th", "el", "ka",
             "hy", "am", "vi", "tr", "de", "fr", "es", "pt_BR", "pl", "cs", "fi", "hu", "eo", "ga", "km"]
    per = budget // len(langs)
    for lang in langs:
        part = bytearray()
        for path in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
            try:
                with open(path, "rb") as f:
                    cat = gettext.GNUTranslations(f)._catalog
            except Exception:
                continue
            for k in sorted(cat, key=str):
                v = cat[k]
                if isinstance(v, str) and v:
                    part += v.encode("utf-8", "surrogatepass") + b"\n"
            if len(part) >= per:
                break
        buf += bytes(part[:per]).rsplit(b"\n", 1)[0] + b"\n"
    return bytes(buf)


def sweep():
    """Every code point of planes 0-3 and 14 in order, 48 to a line, then each one between
    letters, digits and spaces, so each class boundary shows in the pieces."""
    cps = [c for c in list(range(0x40000)) + list(range(0xE0000, 0xE0200)) if not 0xD800 <= c <= 0xDFFF]
    lines = ["".join(chr(c) for c in cps[i:i + 48]) for i in range(0, len(cps), 48)]
    ctx = [f"a{chr(c)}A {chr(c)}1'{chr(c)}s" for c in cps[:0x3400] + cps[0xA000:0xAC00:3] + cps[0x10000::37]]
    return ("\n".join(lines) + "\n" + " ".join(ctx)).encode("utf-8")


def synthetic(rng, n):
    atoms = ["the", " The", "THE", "ſ", "'s", "'S", "'ſ", "'ll", "'LL", "'Re", "'ve", "'m", "'d", "'t", "don't",
             "I'M", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085",
             "0", "7", "12", "123", "4567", "31415926535", "١٢٣", "Ⅻ", "½", ".", ",", "!!", "...", "/", "//", "://",
             "(", ")", "{", "}", "#", "@", "$$", "-", "--", "_", "\\", "\"", "``", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u200d",
             "é", "e\u0301", "\u0301", "ǅ", "ǈ", "ʰ", "中文", "日本語", "한국어", "Привет", "Ελληνικά", "עברית", "العربية",
             "हिन्दी", "தமிழ்", "ไทย", "HelloWorld", "camelCase", "snake_case", "ALLCAPS", "x86_64", "\ufeff", "\ufffd",
             "<|", "|>", "<|endoftext", "endoftext|>", "𝔘𝔫𝔦", "\U00010d50", "\U00010d70", "\U00016d40"]
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(atoms) for _ in range(rng.randint(1, 400))))
    return [s.encode("utf-8") for s in out]


def invalid(rng, base):
    bad = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\x80", b"\xbf\xbf", b"\xf5", b"\xe0\x80\x80", b"\xc3"]
    docs = [bytes(rng.randrange(256) for _ in range(2048)), bytes(rng.randrange(256) for _ in range(300))]
    for i in range(40):
        text = bytearray(base[rng.randrange(len(base))][: rng.randint(10, 3000)])
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(text) + 1) if i % 2 else max(0, len(text) - rng.randint(0, 40))
            text[pos:pos] = rng.choice(bad)
        docs.append(bytes(text))
    # Invalid bytes at the very end of long documents, and after trailing space.
    for b in bad:
        docs.append(base[rng.randrange(len(base))][:20000] + b)
        docs.append(b"hello   \n\t " + b + b" world")
    return docs


def with_specials(rng, base):
    docs = []
    for _ in range(30):
        parts = []
        for _ in range(rng.randint(1, 8)):
            parts.append(base[rng.randrange(len(base))][: rng.randint(0, 500)].decode("utf-8", "replace"))
            parts.append(rng.choice(SPECIALS))
        docs.append("".join(parts).encode("utf-8"))
    return docs


def build_corpus(goroot):
    rng = random.Random(20240601)
    docs = []  # (kind, bytes)

    def add(kind, blobs):
        docs.extend((kind, b) for b in blobs)

    gofiles = glob.glob(os.path.join(goroot, "src", "**", "*.go"), recursive=True)
    add("go", chunks(files_text(spread(gofiles, 400), 700_000)))
    gotext = [p for p in glob.glob(os.path.join(goroot, "src", "**", "testdata", "*"), recursive=True)
              if os.path.isfile(p) and os.path.getsize(p) < 200_000]
    add("go-testdata", [c for c in chunks(files_text(spread(gotext, 300), 300_000)) if valid(c)])
    pyfiles = glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))
    add("python", chunks(files_text(spread(pyfiles, 100), 400_000)))
    man = glob.glob("/usr/share/man/man1/*.gz") + glob.glob("/usr/share/man/*/man1/*.gz")
    add("man", [c for c in chunks(files_text(spread(man, 300), 400_000, lambda p: gzip.open(p).read())) if valid(c)])
    add("catalogs", chunks(catalogs(900_000)))
    add("unicode-sweep", chunks(sweep(), 64 * 1024))
    add("synthetic", synthetic(rng, 300))
    base = [b for _, b in docs]
    add("invalid", invalid(rng, base))
    add("specials", with_specials(rng, base))
    return docs


def valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def tiktoken_encoding(name, vocab):
    def local(url, expected_hash=None):
        return load_tiktoken_bpe(os.path.join(vocab, url.rsplit("/", 1)[1]), expected_hash)

    openai_public.load_tiktoken_bpe = local
    d = openai_public.ENCODING_CONSTRUCTORS[name]()
    return tiktoken.Encoding(d["name"], pat_str=d["pat_str"], mergeable_ranks=d["mergeable_ranks"],
                             special_tokens=d["special_tokens"])


def byte_level_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def gpt2_tokenizer_json(enc, add_prefix_space):
    """A GPT-2 tokenizer.json rebuilt from r50k_base's ranks: the merge that makes the token of
    rank r is the split of its bytes that byte-pair merging with the ranks below r reaches."""
    ranks = enc._mergeable_ranks
    alpha = byte_level_alphabet()
    show = lambda b: "".join(alpha[x] for x in b)
    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        parts = [bytes([x]) for x in tok]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                rr = ranks.get(parts[i] + parts[i + 1])
                if rr is not None and rr < r and (best is None or rr < best[0]):
                    best = (rr, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        assert len(parts) == 2, tok
        merges.append(show(parts[0]) + " " + show(parts[1]))
    return {
        "version": "1.0",
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {show(t): r for t, r in ranks.items()}, "merges": merges},
    }


def write_ids(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}i", *ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", required=True, help="directory with the rank files and tokenizer.json files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--goroot", default=os.popen("go env GOROOT").read().strip())
    a = ap.parse_args()
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(os.path.join(a.out, "docs"))
    docs = build_corpus(a.goroot)
    manifest = {"vocab": os.path.abspath(a.vocab), "tiktoken": tiktoken.__version__, "tokenizers": tokenizers.__version__, "docs": [], "tokenizers_run": []}
    for i, (kind, data) in enumerate(docs):
        name = f"{i:04d}-{kind}.txt"
        with open(os.path.join(a.out, "docs", name), "wb") as f:
            f.write(data)
        manifest["docs"].append({"file": name, "kind": kind, "valid": valid(data)})

    def run(tok, encode, special):
        d = os.path.join(a.out, "ids", tok + ("+special" if special else ""))
        os.makedirs(d)
        for doc, (kind, data) in zip(manifest["docs"], docs):
            if special != (kind == "specials"):
                continue
            write_ids(os.path.join(d, doc["file"] + ".ids"), encode(data))

    for name in ENCODINGS:
        enc = tiktoken_encoding(name, a.vocab)
        run(name, lambda b: enc.encode_ordinary(b.decode("utf-8")) if valid(b) else enc._encode_bytes(b), False)
        run(name, lambda b: enc.encode(b.decode("utf-8"), allowed_special="all"), True)
        manifest["tokenizers_run"].append({"name": name, "kind": "tiktoken"})
        if name == "r50k_base":
            for variant, prefix in (("gpt2-hf", False), ("gpt2-hf-prefix", True)):
                with open(os.path.join(a.out, variant + ".json"), "w") as f:
                    json.dump(gpt2_tokenizer_json(enc, prefix), f)
    hf = [("llama3", os.path.join(a.vocab, "llama3", "tokenizer.json")),
          ("qwen3", os.path.join(a.vocab, "qwen3", "tokenizer.json")),
          ("gpt2-hf", os.path.join(a.out, "gpt2-hf.json")),
          ("gpt2-hf-prefix", os.path.join(a.out, "gpt2-hf-prefix.json"))]
    for name, path in hf:
        tk = tokenizers.Tokenizer.from_file(path)

        def enc(b, split_special):
            tk.encode_special_tokens = not split_special
            return tk.encode(b.decode("utf-8", "replace"), add_special_tokens=False).ids

        run(name, lambda b: enc(b, False), False)
        run(name, lambda b: enc(b, True), True)
        manifest["tokenizers_run"].append({"name": name, "kind": "hf", "path": os.path.abspath(path)})
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    total = sum(len(d) for _, d in docs)
    print(f"conformance set: {len(docs)} documents, {total / 1e6:.1f} MB, in {a.out}")


if __name__ == "__main__":
    sys.exit(main())
