"""Fixtures the end-to-end tests share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = "examples/demo_prompt_encoder.py"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> tuple[str, Path]:
    """`python3 dev.py demo`'s own command line, run once from the repository root for every test
    that reads the demo's output: (what it printed, its run directory)."""
    out = tmp_path_factory.mktemp("demo") / "run"
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "run", "--steps", "20", "--out", str(out), DEMO],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, out
