#!/usr/bin/env python3
"""Writes internal/tokenize/nfc_tables.go (the canonical normalization data that
internal/tokenize's NFC uses) and internal/tokenize/testdata/nfc_reference.txt (strings with
the reference's NFC of each, for the unit tests).

The data is what the reference normalizer does, not what some Unicode version says: Hugging
Face tokenizers' own normalizers (tokenizers.normalizers.NFD and NFC) are run over every code
point. They turn out to use old data (Unicode 9.0.0: no canonical combining class for marks
added since, e.g. U+0D3B or U+1ABF, and no decomposition of U+11938), so the package cannot
use golang.org/x/text's tables (Unicode 15.0.0).

What is probed, and how:
  - decompositions: NFD of each code point alone (Hangul syllables are checked against
    the algorithm of Unicode's chapter 3 and left to the Go code);
  - which characters have a nonzero combining class: NFD reorders U+0345 (class 240)
    before them, or them before U+0334 (class 1);
  - the classes themselves come from Python's unicodedata (classes never change once
    assigned), and are checked against the reference's reordering of each mark next to
    one mark of every class, in both orders;
  - composition pairs: the canonical decomposition pair (from unicodedata) of each
    character that NFD changes and NFC keeps (a primary composite), each checked by
    NFC of the pair. Hangul pairs are checked against the algorithm.
The script stops when a check fails. It is deterministic: the same reference gives the same
files.

Usage: python scripts/tokenize_nfc_tables.py [OUT.go [VECTORS.txt]]  (needs tokenizers; make
generate-tokenize runs it in .venv, make generate-tokenize-check checks the committed files)
"""
import random
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers

NFC = normalizers.NFC()
NFD = normalizers.NFD()

S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def nfd(s):
    return NFD.normalize_str(s)


def nfc(s):
    return NFC.normalize_str(s)


def fail(msg):
    sys.exit("tokenize_nfc_tables: " + msg)


def is_hangul_syllable(c):
    return S_BASE <= c < S_BASE + S_COUNT


def code_points():
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def probe_decompositions(cps):
    """Returns {c: NFD(c)} for every c the reference's NFD changes, and the set of c whose
    NFC alone differs from c; Hangul syllables are checked, not returned."""
    dec, changed = {}, set()
    for c in cps:
        s = chr(c)
        d, k = nfd(s), nfc(s)
        if k != s:
            changed.add(c)
        if is_hangul_syllable(c):
            i = c - S_BASE
            want = chr(L_BASE + i // (V_COUNT * T_COUNT)) + chr(V_BASE + i % (V_COUNT * T_COUNT) // T_COUNT)
            if i % T_COUNT:
                want += chr(T_BASE + i % T_COUNT)
            if d != want or k != s:
                fail(f"Hangul syllable U+{c:04X}: NFD {d!r}, NFC {k!r}")
            continue
        if d != s:
            dec[c] = d
    return dec, changed


def probe_classes(cps, dec):
    """Returns {c: class} for every character that NFD keeps and that has a nonzero class."""
    nonzero = []
    for c in cps:
        if c in dec or is_hangul_syllable(c):
            continue
        s = chr(c)
        if nfd("\u0345" + s) != "\u0345" + s or nfd(s + "\u0334") != s + "\u0334":
            nonzero.append(c)
    ccc = {}
    for c in nonzero:
        v = unicodedata.combining(chr(c))
        if v == 0:
            fail(f"U+{c:04X} is reordered by the reference but has class 0 in unicodedata {unicodedata.unidata_version}")
        ccc[c] = v
    # One mark per class, and every mark against each of them, both ways round.
    rep = {}
    for c, v in sorted(ccc.items()):
        rep.setdefault(v, c)
    for c, v in ccc.items():
        a = chr(c)
        for w, r in rep.items():
            if r == c:
                continue
            b = chr(r)
            if (nfd(a + b) == b + a) != (v > w) or (nfd(b + a) == a + b) != (w > v):
                fail(f"U+{c:04X} (class {v}) and U+{r:04X} (class {w}) are ordered otherwise by the reference")
    return ccc


def canonical_pair(c):
    """The canonical decomposition mapping of c when it is two code points, else None."""
    m = unicodedata.decomposition(chr(c))
    if not m or m.startswith("<"):
        return None
    parts = [int(x, 16) for x in m.split()]
    return tuple(parts) if len(parts) == 2 else None


def probe_compositions(dec, changed, ccc):
    """Returns the sorted composition pairs (first, second, composite), Hangul excepted."""
    pairs = []
    for c in sorted(dec):
        if c in changed:
            continue  # NFC does not keep it: not a primary composite
        p = canonical_pair(c)
        if p is None:
            fail(f"U+{c:04X} is a primary composite for the reference, but unicodedata has no pair for it")
        a, b = p
        if nfc(chr(a) + chr(b)) != chr(c) or nfd(chr(a) + chr(b)) != dec[c]:
            fail(f"U+{a:04X} U+{b:04X} does not give U+{c:04X} in the reference")
        pairs.append((a, b, c))
    for c in sorted(changed):
        if c not in dec:
            fail(f"NFC changes U+{c:04X} but NFD does not")
    # Every decomposition is in canonical order and made of characters NFD keeps.
    for c, d in dec.items():
        cls = [ccc.get(ord(x), 0) for x in d]
        if any(ord(x) in dec for x in d) or any(0 < y < x for x, y in zip(cls, cls[1:])):
            fail(f"NFD of U+{c:04X} is not fully decomposed and ordered")
    # Hangul: L+V and LV+T compose (T_BASE itself does not), nothing else among jamo.
    for li in range(L_COUNT):
        for vi in range(V_COUNT):
            lv = S_BASE + (li * V_COUNT + vi) * T_COUNT
            if nfc(chr(L_BASE + li) + chr(V_BASE + vi)) != chr(lv):
                fail(f"Hangul L+V U+{L_BASE + li:04X} U+{V_BASE + vi:04X}")
            for ti in range(T_COUNT):
                want = chr(lv + ti) if ti else chr(lv) + chr(T_BASE)
                if nfc(chr(lv) + chr(T_BASE + ti)) != want:
                    fail(f"Hangul LV+T U+{lv:04X} U+{T_BASE + ti:04X}")
    return pairs


def class_runs(ccc):
    runs = []
    for c in sorted(ccc):
        if runs and runs[-1][1] == c - 1 and runs[-1][2] == ccc[c]:
            runs[-1][1] = c
        else:
            runs.append([c, c, ccc[c]])
    return runs


def go_string(s):
    return '"' + "".join("\\u%04X" % ord(x) if ord(x) < 0x10000 else "\\U%08X" % ord(x) for x in s) + '"'


def rows(items, per_line):
    out = []
    for i in range(0, len(items), per_line):
        out.append("\t" + " ".join(items[i:i + per_line]))
    return out


def write_go(path, ccc, dec, changed, pairs):
    lines = [
        "// Code generated by scripts/tokenize_nfc_tables.py (make generate-tokenize) from tokenizers "
        + tokenizers.__version__ + "; DO NOT EDIT.",
        "",
        "package tokenize",
        "",
        "// The canonical normalization data of Hugging Face tokenizers' NFC (Unicode 9.0.0),",
        "// probed by running its normalizers over every code point. Hangul syllables are left",
        "// to the algorithm (nfc.go).",
        "",
        "// nfcClassRuns lists the characters with a nonzero canonical combining class, as runs",
        "// {first, last, class}. Characters with a decomposition are not in it.",
        "var nfcClassRuns = [...]struct {",
        "\tfirst, last rune",
        "\tclass       uint8",
        "}{",
    ]
    lines += rows(["{0x%X, 0x%X, %d}," % tuple(r) for r in class_runs(ccc)], 5)
    lines += [
        "}",
        "",
        "// nfcDecompositions maps each character to its full canonical decomposition (NFD),",
        "// with excluded set when NFC does not compose it back (it never occurs in NFC text).",
        "var nfcDecompositions = [...]struct {",
        "\tr        rune",
        "\texcluded bool",
        "\tnfd      string",
        "}{",
    ]
    lines += rows(["{0x%X, %s, %s}," % (c, "true" if c in changed else "false", go_string(d))
                   for c, d in sorted(dec.items())], 3)
    lines += [
        "}",
        "",
        "// nfcCompositions lists the primary composites by the pair they compose from:",
        "// {first, second, composite}.",
        "var nfcCompositions = [...][3]rune{",
    ]
    lines += rows(["{0x%X, 0x%X, 0x%X}," % p for p in pairs], 5)
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_vectors(path, ccc, dec, pairs):
    """Strings of characters that take part in normalization, with the reference's NFC."""
    firsts = sorted({a for a, _, _ in pairs})
    seconds = sorted({b for _, b, _ in pairs})
    alphabet = sorted(set(ccc) | set(dec) | set(firsts) | set(seconds)
                      | set(range(L_BASE, L_BASE + L_COUNT)) | set(range(V_BASE, V_BASE + V_COUNT))
                      | set(range(T_BASE, T_BASE + T_COUNT)) | {0xAC00, 0xAC01, 0xD7A3})
    rng = random.Random(20250916)
    cases = []
    # Every character alone and after a letter, a composite pair's first and another mark.
    for c in alphabet:
        cases.append([c])
    for a, b, _ in pairs:
        m = rng.choice(sorted(ccc))
        cases.append([a, m, b])
        cases.append([a, b, m])
    for _ in range(3000):
        n = rng.randint(2, 8)
        s = []
        for _ in range(n):
            k = rng.random()
            if k < 0.25:
                s.append(rng.choice(firsts))
            elif k < 0.55:
                s.append(rng.choice(seconds))
            elif k < 0.85:
                s.append(rng.choice(sorted(ccc)))
            else:
                s.append(rng.choice(alphabet))
        cases.append(s)
    with open(path, "w") as f:
        f.write("# Generated by scripts/tokenize_nfc_tables.py from tokenizers " + tokenizers.__version__
                + "; DO NOT EDIT.\n# Each line: code points of a string; the reference's NFC of it.\n")
        for s in cases:
            text = "".join(chr(c) for c in s)
            f.write(" ".join("%X" % c for c in s) + ";" + " ".join("%X" % ord(x) for x in nfc(text)) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "internal/tokenize/nfc_tables.go"
    vectors = sys.argv[2] if len(sys.argv) > 2 else "internal/tokenize/testdata/nfc_reference.txt"
    cps = code_points()
    dec, changed = probe_decompositions(cps)
    ccc = probe_classes(cps, dec)
    pairs = probe_compositions(dec, changed, ccc)
    write_go(out, ccc, dec, changed, pairs)
    write_vectors(vectors, ccc, dec, pairs)
    print(f"{len(ccc)} classes, {len(dec)} decompositions ({len(changed)} excluded), {len(pairs)} pairs")


if __name__ == "__main__":
    main()
