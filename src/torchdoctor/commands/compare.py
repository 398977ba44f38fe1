"""`torchdoctor compare RUN_A RUN_B [...]`: before/after table, noise-aware ratios."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.compare.runs import compare_runs, load_runs
from torchdoctor.errors import EXIT_OK, UsageError
from torchdoctor.report import RENDERERS, emit

HELP = "compare run directories: before/after table, noise-aware ratios, findings gone and new"


def main(argv: Sequence[str]) -> int:
    p = CommandParser(prog="torchdoctor compare", description=HELP)
    p.add_argument("runs", nargs="+", type=Path, help="run directories; the first is the baseline")
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    opts = p.parse_args(argv)
    if len(opts.runs) < 2:
        raise UsageError("compare needs at least two run directories: torchdoctor compare BEFORE AFTER")
    emit(compare_runs(load_runs(opts.runs)), opts.format)
    return EXIT_OK
