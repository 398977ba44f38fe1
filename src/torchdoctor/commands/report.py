"""`torchdoctor report RUN_DIR [--format ...]`: re-render a run directory without re-running."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.errors import EXIT_OK
from torchdoctor.report import RENDERERS, emit


def main(argv: Sequence[str]) -> int:
    from torchdoctor.rundir import diagnose_run_dir

    p = CommandParser(prog="torchdoctor report", description="re-render a run directory without re-running")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    opts = p.parse_args(argv)
    emit(diagnose_run_dir(opts.run_dir), opts.format)
    return EXIT_OK
