"""`torchdoctor report DIR [--format ...]`: re-render a run directory (or a tune directory)
without re-running."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.errors import EXIT_OK
from torchdoctor.report import RENDERERS, emit

# this command's line in `torchdoctor --help` too (cli.py reads it from here)
HELP = "re-render a run directory (or a tune directory) without re-running"


def main(argv: Sequence[str]) -> int:
    from torchdoctor.pipeline import diagnose_run_dir

    p = CommandParser(prog="torchdoctor report", description=HELP)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    opts = p.parse_args(argv)
    emit(_tune_report(opts.run_dir) or diagnose_run_dir(opts.run_dir), opts.format)
    return EXIT_OK


def _tune_report(folder: Path):
    """A tune directory's own report (tune.json): its trials are run directories of their
    own, and what tune concluded across them is that file; None for anything else."""
    from torchdoctor.errors import InputError
    from torchdoctor.model.findings import Report
    from torchdoctor.model.layout import RECORD_FILE
    from torchdoctor.model.serialize import SchemaError

    tune_file = folder / "tune.json"
    if not (tune_file.exists() or tune_file.is_symlink()) or (folder / RECORD_FILE).exists():
        return None  # (a tune.json that is a FIFO or a link to a device is refused by Report.load)
    try:
        return Report.load(tune_file)
    except SchemaError as exc:
        raise InputError(f"cannot read the tune report: {exc}; re-run `torchdoctor tune` to make a new one") from None
