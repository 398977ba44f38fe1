"""`torchdoctor compare RUN_A RUN_B [...]`: before/after table, noise-aware ratios; a CI gate
(`--fail-if-slower PCT`, `--fail-if-not-faster PCT`) and a projection (`--hours H`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser, non_negative
from torchdoctor.compare.runs import ci_gate, compare_runs, gate_table, load_runs, projection_table
from torchdoctor.errors import EXIT_OK, EXIT_SCRIPT_FAILED, UsageError
from torchdoctor.report import RENDERERS, emit

HELP = "compare run directories: before/after table, noise-aware ratios, findings gone and new"
EXIT_GATE_FAILED = EXIT_SCRIPT_FAILED  # 1: what CI reads as a failed check


def parser() -> CommandParser:
    p = CommandParser(prog="torchdoctor compare", description=HELP)
    p.add_argument("runs", nargs="+", type=Path, help="run directories; the first is the baseline")
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    p.add_argument("--fail-if-slower", type=non_negative(float), metavar="PCT",
                   help="exit 1 when a run is slower than the first by more than PCT %% beyond the measured noise")
    p.add_argument("--fail-if-not-faster", type=non_negative(float), metavar="PCT",
                   help="exit 1 unless every run is faster than the first by more than PCT %% beyond the noise")
    p.add_argument("--hours", type=non_negative(float), metavar="H",
                   help="project each change onto a training run of H hours at the first run's speed")
    p.add_argument("--price-per-hour", type=non_negative(float), metavar="P",
                   help="with --hours: the cost saved at P per device-hour")
    return p


def main(argv: Sequence[str]) -> int:
    opts = parser().parse_args(argv)
    if len(opts.runs) < 2:
        raise UsageError("compare needs at least two run directories: torchdoctor compare BEFORE AFTER")
    if opts.price_per_hour is not None and not opts.hours:
        raise UsageError("--price-per-hour needs --hours H (the length of the training run to price)")
    runs = load_runs(opts.runs)
    report = compare_runs(runs)
    if opts.hours:
        report.tables.insert(1, projection_table(runs, opts.hours, opts.price_per_hour))
    gated = opts.fail_if_slower is not None or opts.fail_if_not_faster is not None
    results = ci_gate(runs, opts.fail_if_slower, opts.fail_if_not_faster) if gated else []
    if gated:
        report.tables.insert(0, gate_table(results, opts.fail_if_slower, opts.fail_if_not_faster))
    emit(report, opts.format)
    for result in results:
        sys.stderr.write(f"torchdoctor compare: {result.text}\n")
    return EXIT_GATE_FAILED if any(not r.passed for r in results) else EXIT_OK
