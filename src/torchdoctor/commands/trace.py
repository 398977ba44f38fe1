"""`torchdoctor trace TRACE.json[.gz]... [--format text|md|json]`: explain Kineto traces."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.errors import EXIT_OK
from torchdoctor.report import RENDERERS, emit

HELP = "explain torch.profiler (Kineto) traces: GPU idle time by cause, syncs, copies, kernels"


def main(argv: Sequence[str]) -> int:
    from torchdoctor.diagnosis.trace import trace_report
    from torchdoctor.trace import analyze_trace_files

    p = CommandParser(prog="torchdoctor trace", description=HELP)
    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                   help="Kineto trace files (.json or .json.gz), one per rank")
    p.add_argument("--format", choices=sorted(RENDERERS), default="text", help="what to print")
    opts = p.parse_args(list(argv))
    emit(trace_report(analyze_trace_files(opts.traces)), opts.format)
    return EXIT_OK
