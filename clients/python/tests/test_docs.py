"""The README examples are copied from code that a test runs: every code block
marked <!-- code from PATH --> holds only lines of PATH (and "..." for what
is left out), so an example cannot drift from what is tested."""

import os
import re

from rundaemon import REPO

MARK = re.compile(r"<!-- code from (\S+) -->\s*\n\s*```python\n(.*?)```", re.S)


def test_readme_examples_are_tested_code():
    checked = 0
    for doc in ("README.md", os.path.join("clients", "python", "README.md"), os.path.join("docs", "metadata.md"),
                os.path.join("docs", "trainers.md")):
        with open(os.path.join(REPO, doc), encoding="utf-8") as f:
            text = f.read()
        for source, block in MARK.findall(text):
            with open(os.path.join(REPO, source), encoding="utf-8") as f:
                lines = {line.strip() for line in f}
            for line in block.splitlines():
                line = line.strip()
                if line and line != "...":
                    assert line in lines, f"{doc}: {line!r} is not in {source}"
            checked += 1
    assert checked >= 5, f"only {checked} marked examples found"
