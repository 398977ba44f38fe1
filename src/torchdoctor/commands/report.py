"""`torchdoctor report RUN_DIR [--format ...]`: re-render a run directory without re-running."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.errors import EXIT_OK
from torchdoctor.report import RENDERERS, render


def main(argv: Sequence[str]) -> int:
    from torchdoctor.diagnose.run import analyze
    from torchdoctor.rundir import load_record

    p = CommandParser(prog="torchdoctor report", description="re-render a run directory without re-running")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    opts = p.parse_args(argv)
    sys.stdout.write(render(analyze(load_record(opts.run_dir)), opts.format))
    return EXIT_OK
