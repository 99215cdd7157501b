"""Tests with real PyTorch (and Hugging Face transformers): `make test-torch`
runs them in .venv-torch, against the real daemon binary."""

import os
import sys

# The corpus writers and the daemon fixture of the main suite.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
