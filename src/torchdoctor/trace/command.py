"""`torchdoctor trace TRACE.json[.gz]... [--format text|md|json]`: explain Kineto traces."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from torchdoctor.errors import EXIT_OK, UsageError
from torchdoctor.report import RENDERERS, render
from torchdoctor.trace.analyze import analyze_trace_files
from torchdoctor.trace.report import trace_report


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message}; see `torchdoctor trace --help`")


class TraceCommand:
    name = "trace"
    help = "explain torch.profiler (Kineto) traces: GPU idle time by cause, syncs, copies, kernels"

    def parser(self) -> argparse.ArgumentParser:
        p = _Parser(prog="torchdoctor trace", description=self.help)
        p.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                       help="Kineto trace files (.json or .json.gz), one per rank")
        p.add_argument("--format", choices=sorted(RENDERERS), default="text", help="what to print")
        return p

    def main(self, argv: Sequence[str]) -> int:
        opts = self.parser().parse_args(list(argv))
        summary = analyze_trace_files(opts.traces)
        sys.stdout.write(render(trace_report(summary), opts.format))
        return EXIT_OK
