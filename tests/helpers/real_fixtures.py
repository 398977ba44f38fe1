"""Recordings from a real CUDA device (tests/fixtures/real/<device>-<date>/, written by
`python3 dev.py gpu` and `--unpack`), as pytest parameters for the twins of the tests that use
generated GPU traces. While no recording exists, each twin is one skipped case saying so.

TORCHDOCTOR_REAL_FIXTURES points the twins at another folder: the GPU check runs them on the
recording it has just made, before anything is unpacked here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
ENV = "TORCHDOCTOR_REAL_FIXTURES"
NONE_YET = ("no recording from a CUDA device in {root} yet: run `python3 dev.py gpu` on a GPU machine, then "
            "`python3 dev.py gpu --unpack DIR` (see tests/fixtures/real/README.md)")


def root() -> Path:
    return Path(os.environ.get(ENV) or REAL)


def recordings() -> list[tuple[Path, dict]]:
    """(folder, meta) of every recording made on CUDA: the root itself or its subfolders."""
    base = root()
    found = []
    for folder in [base, *sorted(p for p in base.glob("*") if p.is_dir())]:
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text())
        if meta.get("tags", {}).get("cuda_used"):
            found.append((folder, meta))
    return found


def cases(*files: str) -> list:
    """One parameter per recording holding every file named (relative to the recording)."""
    params = [pytest.param(folder, id=folder.name) for folder, meta in recordings()
              if all((folder / f).is_file() for f in files)]
    if params:
        return params
    reason = NONE_YET.format(root=root())
    if recordings():
        reason = f"the recordings in {root()} hold no {', '.join(files)} (see their meta.json: 'skipped' says why)"
    return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-recording")]
