"""`torchdoctor tune [OPTIONS] SCRIPT.py [ARGS...]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from torchdoctor.commands.parser import CommandParser, non_negative
from torchdoctor.tune.report import estimate_checks, tune_report
from torchdoctor.errors import EXIT_OK, EXIT_TERMINATED, Interrupted, ScriptFailed, UsageError
from torchdoctor.report import RENDERERS, emit, render
from torchdoctor.run.knobs.spec import parse_settings
from torchdoctor.run.signals import current as current_signals
from torchdoctor.run.target import check_target
from torchdoctor.model.layout import create_run_dir
from torchdoctor.model.serialize import to_plain
from torchdoctor.tune.plan import Trial, parse_trials
from torchdoctor.tune.trials import TrialSettings
from torchdoctor.tune.tuner import Tuner

HELP = "run a baseline, try the knobs its findings suggest, and measure each one"

DEFAULT_PARENT = Path("torchdoctor-tunes")


class TuneProgress:
    """One line per trial on stderr: which trial, a bar, and the time the rest should take."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr

    def __call__(self, position: int, total: int | None, trial: Trial, eta_s: float | None) -> None:
        if total:
            done = position - 1
            bar = "#" * done + "-" * (total - done)
            where = f"[{bar}] {position}/{total}"
        else:
            where = "[baseline]"
        eta = f", ~{eta_s:.0f} s left" if eta_s else ""
        self.stream.write(f"torchdoctor tune {where} running {trial.name}{eta}\n")
        self.stream.flush()


def parser() -> CommandParser:
    p = CommandParser(prog="torchdoctor tune", description=HELP)
    p.add_argument("--steps", type=int, default=30, help="measured steps per trial (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="warmup steps per trial (default 5)")
    p.add_argument("--max-seconds", type=float, default=300.0, help="limit per trial")
    p.add_argument("--budget", type=float, help="seconds for the whole tune; trials that would not fit are skipped")
    p.add_argument("--trials", action="append", metavar="'KNOB=V KNOB=V'",
                   help="choose the trials by hand (repeatable); default: from the baseline's findings")
    p.add_argument("--out", type=Path, help="tune directory (default ./torchdoctor-tunes/<time>-<script>/)")
    p.add_argument("--format", choices=sorted(RENDERERS), default="text")
    p.add_argument("--nproc-per-node", type=int, metavar="N",
                   help="a DDP script: every trial runs N ranks (and a trial with nproc=1 shows one rank beside N)")
    p.add_argument("--hours", type=non_negative(float), metavar="H",
                   help="project each measured gain onto a training run of H hours (hours saved, with the band)")
    p.add_argument("--price-per-hour", type=non_negative(float), metavar="P",
                   help="with --hours: the cost saved at P per device-hour")
    p.add_argument("-m", dest="module", action="store_true", help="the target is a module, as with python -m")
    p.add_argument("target", help="the training script (or module with -m)")
    p.add_argument("args", nargs="...", help="arguments for the script")
    return p


def main(argv: Sequence[str]) -> int:
    opts = parser().parse_args(list(argv))
    if opts.steps < 3 or opts.warmup < 0:
        raise UsageError("tune needs --steps ≥ 3 (noise is measured across windows of steps) and --warmup ≥ 0")
    if opts.price_per_hour is not None and not opts.hours:
        raise UsageError("--price-per-hour needs --hours H (the length of the training run to price)")
    trials = parse_trials(opts.trials) if opts.trials else None
    for trial in trials or []:
        parse_settings(trial.settings())  # a bad knob fails now, not in the fifth trial
    check_target(opts.target, opts.module)
    tune_dir = create_run_dir(opts.out, opts.target, parent=DEFAULT_PARENT)
    if opts.nproc_per_node is not None and opts.nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be at least 1")
    settings = TrialSettings(opts.target, list(opts.args), opts.module, steps=opts.steps, warmup=opts.warmup,
                             max_seconds=opts.max_seconds, nproc_per_node=opts.nproc_per_node)
    outcome = Tuner(settings, tune_dir, opts.budget, trials, on_trial=TuneProgress()).run()
    signals = current_signals()
    if signals is not None:  # a second Ctrl-C or SIGTERM must not cut the writing short
        signals.quiet = True
    report = tune_report(outcome, opts.hours, opts.price_per_hour)
    report.save(tune_dir / "tune.json")
    (tune_dir / "tune.md").write_text(render(report, "md"), encoding="utf-8")
    (tune_dir / "tune.html").write_text(render(report, "html"), encoding="utf-8")
    (tune_dir / "estimates.json").write_text(json.dumps(to_plain(estimate_checks(outcome)) if outcome.baseline.ok
                                                        else [], indent=2) + "\n")
    emit(report, opts.format)
    sys.stderr.write(f"torchdoctor tune: {len(outcome.trials)} trials; tune directory: {tune_dir}\n")
    if outcome.interrupted:
        how = "terminated (SIGTERM)" if outcome.exit_code == EXIT_TERMINATED else "interrupted"
        raise Interrupted(f"{how}; the trials that finished are in {tune_dir}", outcome.exit_code)
    if not outcome.baseline.ok:
        raise ScriptFailed(f"the baseline run failed (exit {outcome.baseline.result.exit_code}); "
                           f"see {outcome.baseline.result.run_dir.with_suffix('.stderr.log')}")
    return EXIT_OK
