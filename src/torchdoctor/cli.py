"""Command line: `torchdoctor run|report|rules`. Each subcommand is a small object with
`main(argv) -> int`; domain errors become exit codes in `main` below, and only there."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from torchdoctor import __version__
from torchdoctor.argparsing import CommandParser
from torchdoctor.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Interrupted,
    NoStepsMeasured,
    ScriptFailed,
    TorchdoctorError,
    UsageError,
)
from torchdoctor.report import RENDERERS, render


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be ≥ 0, got {text}")
        return value
    return parse


class RunCommand:
    name = "run"
    help = "run a training script under the probes and diagnose it"

    def parser(self) -> argparse.ArgumentParser:
        from torchdoctor.knobs import knob_help

        p = CommandParser(prog="torchdoctor run", description=self.help,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="knobs for --set (this run only, the script is not edited):\n" + knob_help())
        p.add_argument("--steps", type=_positive(int), default=30, help="optimizer steps to measure (default 30)")
        p.add_argument("--warmup", type=_positive(int), default=3, help="steps run before measuring (default 3)")
        p.add_argument("--max-seconds", type=_positive(float), default=300.0, help="stop the script after this long")
        p.add_argument("--out", type=Path, help="run directory (default ./torchdoctor-runs/<time>-<script>/)")
        p.add_argument("--format", choices=sorted(RENDERERS), default="text", help="what to print")
        p.add_argument("--trace", action=argparse.BooleanOptionalAction, default=None,
                       help="save a torch.profiler trace of 2 steps (default: only when CUDA is used)")
        p.add_argument("--set", dest="knobs", action="append", default=[], metavar="KNOB=VALUE",
                       help="apply a fix or a measurement for this run only (repeatable; see below)")
        p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like `python -m` (then its args)")
        p.add_argument("target", nargs="?", help="the training script")
        p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
        return p

    def main(self, argv: Sequence[str]) -> int:
        from torchdoctor.analysis import analyze
        from torchdoctor.knobs import parse_settings
        from torchdoctor.report.progress import RunProgress
        from torchdoctor.rundir import create_run_dir, write_run
        from torchdoctor.runner import RunRequest, check_target, execute

        argv = list(argv)
        split = _module_split(argv)
        if split is not None:  # `-m MODULE ARGS...`: everything after the module is the module's
            opts = self.parser().parse_args(argv[:split])
            if split + 1 >= len(argv):
                raise UsageError("-m needs a module name, e.g. torchdoctor run -m mypkg.train")
            target, args, module = argv[split + 1], argv[split + 2:], True
        else:
            opts = self.parser().parse_args(argv)
            if not opts.target:
                raise UsageError("no script given; usage: torchdoctor run [OPTIONS] train.py [ARGS...]")
            target, args, module = opts.target, opts.args, False
        if opts.steps == 0:
            raise UsageError("--steps must be at least 1")
        knobs = parse_settings(opts.knobs)
        progress = RunProgress(total_steps=opts.steps, warmup=opts.warmup)
        request = RunRequest(target=target, args=list(args), module=module, warmup=opts.warmup,
                             steps=opts.steps, max_seconds=opts.max_seconds, trace=opts.trace, knobs=knobs,
                             on_step=lambda s: progress.update(s.index, s.duration_s))
        check_target(request)
        run_dir = create_run_dir(opts.out, target)
        record = execute(request, run_dir)
        report = analyze(record)
        write_run(run_dir, record, report)
        progress.close(f"torchdoctor: {record.run.status} after {len(record.steps)} steps; run directory: {run_dir}")
        if record.run.error:
            sys.stderr.write(record.run.error)
        sys.stdout.write(render(report, opts.format))
        return _outcome(record, run_dir)


_VALUE_OPTIONS = {"--steps", "--warmup", "--max-seconds", "--out", "--format", "--set"}


def _module_split(argv: list[str]) -> int | None:
    """Index of a `-m` that comes before the script, as in `python -m`; None if absent."""
    for i, token in enumerate(argv):
        if token == "-m":
            return i
        if not token.startswith("-") and (i == 0 or argv[i - 1] not in _VALUE_OPTIONS):
            return None  # the script path: anything after it belongs to the script
    return None


def _outcome(record, run_dir: Path) -> int:
    run = record.run
    if run.status == "crashed":
        raise ScriptFailed(f"{run.script} raised (traceback above); the partial run is in {run_dir}")
    if run.status == "exited" and run.exit_code != 0:
        raise ScriptFailed(f"{run.script} exited with code {run.exit_code}; the partial run is in {run_dir}")
    if run.status == "interrupted":
        raise Interrupted(f"interrupted; the partial run is in {run_dir}")
    if not record.steps and run.status != "loader-only":
        raise NoStepsMeasured(
            f"{run.script} never called optimizer.step(), so there is no training step to diagnose; "
            f"point torchdoctor at the training entry point (data-loader and phase measurements are in {run_dir})"
        )
    return EXIT_OK


class ReportCommand:
    name = "report"
    help = "re-render a run directory without re-running"

    def main(self, argv: Sequence[str]) -> int:
        from torchdoctor.analysis import analyze
        from torchdoctor.rundir import load_record

        p = CommandParser(prog="torchdoctor report", description=self.help)
        p.add_argument("run_dir", type=Path)
        p.add_argument("--format", choices=sorted(RENDERERS), default="text")
        opts = p.parse_args(argv)
        sys.stdout.write(render(analyze(load_record(opts.run_dir)), opts.format))
        return EXIT_OK


class RulesCommand:
    name = "rules"
    help = "list the rules, or explain one (torchdoctor rules TD301)"

    def main(self, argv: Sequence[str]) -> int:
        from torchdoctor.rules.docs import explain_rule, rules_markdown, rules_table
        from torchdoctor.rules.registry import rule_by_code

        p = CommandParser(prog="torchdoctor rules", description=self.help)
        p.add_argument("code", nargs="?")
        p.add_argument("--format", choices=["text", "md"], default="text")
        opts = p.parse_args(argv)
        if opts.code is None:
            sys.stdout.write(rules_markdown() if opts.format == "md" else rules_table())
            return EXIT_OK
        rule = rule_by_code(opts.code)
        if rule is None:
            raise UsageError(f"no rule {opts.code!r}; `torchdoctor rules` lists them")
        sys.stdout.write(explain_rule(rule))
        return EXIT_OK


class _Deferred:
    """A subcommand whose module is imported only when it runs, so `run` never pays for
    the linter's or the trace parser's imports. (The commands above import what they need
    inside `main` for the same reason: start-up is part of every command's time, and
    pre-commit starts `lint` on every commit.)"""

    def __init__(self, name: str, module: str, cls: str):
        self.name, self._module, self._cls = name, module, cls

    def main(self, argv: Sequence[str]) -> int:
        import importlib

        return getattr(importlib.import_module(self._module), self._cls)().main(argv)


COMMANDS = {c.name: c for c in (
    RunCommand(), ReportCommand(), RulesCommand(),
    _Deferred("compare", "torchdoctor.compare.command", "CompareCommand"),
    _Deferred("tune", "torchdoctor.tune.command", "TuneCommand"),
    _Deferred("lint", "torchdoctor.lint.command", "LintCommand"),
    _Deferred("trace", "torchdoctor.trace.command", "TraceCommand"),
)}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        names = ", ".join(COMMANDS)
        sys.stdout.write(f"torchdoctor {__version__}: why is my PyTorch training slow?\n"
                         f"usage: torchdoctor {{{names}}} ...   (torchdoctor COMMAND --help)\n")
        return EXIT_OK if argv else 2
    if argv[0] == "--version":
        sys.stdout.write(f"torchdoctor {__version__}\n")
        return EXIT_OK
    command = COMMANDS.get(argv[0])
    try:
        if command is None:
            raise UsageError(f"unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}")
        return command.main(argv[1:])
    except TorchdoctorError as exc:
        sys.stderr.write(f"torchdoctor: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("torchdoctor: interrupted\n")
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # argparse --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
