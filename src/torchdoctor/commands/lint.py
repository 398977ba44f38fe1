"""`torchdoctor lint PATH...`: report the slow-training habits the source shows.

Exit codes (DESIGN.md §2): 1 when findings are reported, 0 when clean, 2 on a usage error or
when nothing could be read. Findings go to stdout (or --output); unreadable files, notes and
the summary go to stderr, so `--format json|sarif` output stays machine-readable.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from torchdoctor.commands.parser import CommandParser
from torchdoctor.errors import EXIT_OK, InputError, UsageError
from torchdoctor.lint.api import LintOptions, LintResult, lint_paths, lint_text
from torchdoctor.lint.config import SEVERITIES
from torchdoctor.lint.formats import FORMATS
from torchdoctor.lint.selection import parse_codes

if TYPE_CHECKING:
    from torchdoctor.lint.fix import FileFix

# this command's line in `torchdoctor --help` too (cli.py reads it from here)
HELP = "find slow-training habits in source files without running them"
EXIT_FINDINGS = 1


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="torchdoctor lint", formatter_class=argparse.RawDescriptionHelpFormatter, description=(
        f"{HELP}. Exit status: 1 when findings are reported, 0 when clean, 2 on usage errors or when nothing "
        "could be read."), epilog=_EPILOG)
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="files or folders (.py, .ipynb); - reads stdin")
    p.add_argument("--stdin-filename", default="<stdin>", help="the name of the file read from stdin")
    p.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default text)")
    p.add_argument("--select", action="append", metavar="CODES", help="only these codes or prefixes, e.g. TD2,TD301")
    p.add_argument("--ignore", action="append", metavar="CODES", help="skip these codes or prefixes")
    p.add_argument("--min-severity", choices=SEVERITIES, help=(
        "hide findings below this severity (default low: `info` findings, where a value is only "
        "known at run time, are hidden)"))
    p.add_argument("--fix", action="store_true", help="apply the safe rewrites, then report what is left")
    p.add_argument("--diff", action="store_true", help="print the rewrites --fix would apply; change nothing")
    p.add_argument("--config", type=Path, help="read [tool.torchdoctor.lint] from this pyproject.toml")
    p.add_argument("--isolated", action="store_true", help="ignore every pyproject.toml")
    p.add_argument("--output", type=Path, help="write the report to this file instead of stdout")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings are reported")
    p.add_argument("--force-exclude", action="store_true", help=(
        "apply the configured and default excludes to paths named on the command line too "
        "(for pre-commit, which names every changed file)"))
    p.add_argument("--jobs", "-j", type=_worker_count, default=0, metavar="N",
                   help="worker processes, 1 or more (default: one per CPU on large trees)")
    return p


def _worker_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of worker processes: give 1 or more, "
                                         f"or leave --jobs out to choose automatically")
    return count


_EPILOG = """\
silencing:
  x = loss.item()  # noqa: TD201      one code (a prefix such as TD2 covers a family)
  x = loss.item()  # noqa             every code on the line
  # torchdoctor: noqa: TD105           a line of its own: the whole file

configuration (the nearest pyproject.toml above the linted path):
  [tool.torchdoctor.lint]
  select = ["TD1", "TD2"]
  ignore = ["TD105"]
  exclude = ["legacy/"]
  per-file-ignores = { "tests/*" = ["TD201"] }
A file named on the command line is linted even when `exclude` matches it, unless
--force-exclude is given (the pre-commit hook passes it, as ruff's does).

`torchdoctor rules CODE` explains a rule: why it is slow, an example, the fix.
"""


def main(argv: Sequence[str]) -> int:
    opts = build_parser().parse_args(list(argv))
    if not opts.paths:
        raise UsageError("no paths given; usage: torchdoctor lint PATH... (e.g. torchdoctor lint train.py src/)")
    if opts.fix and opts.diff:
        raise UsageError("--fix and --diff exclude each other: --diff only shows what --fix would do")
    if opts.config is not None and not opts.config.is_file():
        raise InputError(f"--config {opts.config}: no such file")
    select = parse_codes(opts.select, "--select")
    if select == []:  # `--select ""` (an unset shell variable): selecting nothing is never meant
        raise UsageError("--select names no codes; give codes or prefixes (e.g. --select TD2,TD301 or ALL), "
                         "or leave it out to report every code")
    options = LintOptions(select=select, ignore=parse_codes(opts.ignore, "--ignore"), config=opts.config,
                          isolated=opts.isolated, min_severity=opts.min_severity, jobs=opts.jobs,
                          force_exclude=opts.force_exclude)
    if [str(p) for p in opts.paths] == ["-"]:
        if opts.fix or opts.diff:
            raise UsageError("--fix and --diff rewrite files; they do not work on stdin")
        result = lint_text(sys.stdin.read(), opts.stdin_filename, options)
        _report_problems(result)
        if result.nothing_readable and result.files_found:  # none found: excluded by --force-exclude
            raise InputError(f"{opts.stdin_filename} could not be linted (see the message above)")
        _emit(FORMATS[opts.format](result), opts.output)
        return EXIT_FINDINGS if result.findings and not opts.exit_zero else EXIT_OK
    result = lint_paths(opts.paths, options)
    _report_problems(result)
    if result.nothing_readable and (result.problems or not result.files_found):
        if not result.problems:
            sys.stderr.write("torchdoctor lint: no Python files or notebooks found\n")
            return EXIT_OK
        raise InputError("nothing could be linted (see the messages above)")
    if opts.diff or opts.fix:
        from torchdoctor.lint.fix import plan_fixes  # libcst loads only for rewrites

        fixes, notes = plan_fixes(result.findings, result.files, result.relint)
        for note in notes:
            sys.stderr.write(f"{note}\n")
        if opts.diff:
            sys.stdout.write("".join(f.diff() for f in fixes if f.changed))
            return EXIT_FINDINGS if any(f.changed for f in fixes) and not opts.exit_zero else EXIT_OK
        fixed = _write(fixes)
        if fixed:
            sys.stderr.write(f"torchdoctor lint: fixed {fixed} finding(s) in "
                             f"{sum(f.changed for f in fixes)} file(s)\n")
            result = lint_paths(opts.paths, options)
    _emit(FORMATS[opts.format](result), opts.output)
    _summary(result, opts.format)
    return EXIT_FINDINGS if result.findings and not opts.exit_zero else EXIT_OK


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--output {output}: cannot write ({exc.strerror or exc})") from None


def _write(fixes: list[FileFix]) -> int:
    fixed = 0
    for fix in fixes:
        if not fix.changed:
            continue
        # Write beside the file and rename over it: an interrupted --fix never leaves half a file.
        mode = fix.path.stat().st_mode
        handle, temp = tempfile.mkstemp(dir=fix.path.parent, prefix=f".{fix.path.name}.", suffix=".tmp")
        with os.fdopen(handle, "wb") as stream:
            stream.write(fix.after)
        os.chmod(temp, mode)
        os.replace(temp, fix.path)
        fixed += len(fix.applied)
    return fixed


def _report_problems(result: LintResult) -> None:
    for problem in result.problems:
        sys.stderr.write(f"{problem}\n")
    for note in result.notes:
        sys.stderr.write(f"{note}\n")


def _summary(result: LintResult, fmt: str) -> None:
    if fmt != "text":
        return
    fixable = sum(f.fixable for f in result.findings)
    parts = [f"{len(result.findings)} finding(s) in {result.files_linted} file(s)"]
    if fixable:
        parts.append(f"{fixable} fixable with --fix")
    if result.hidden:
        parts.append(f"{result.hidden} below --min-severity hidden ({_hidden_severities(result)})")
    sys.stderr.write(f"torchdoctor lint: {'; '.join(parts)}\n")


def _hidden_severities(result: LintResult) -> str:
    """`2 medium, 7 info: the value is only known at run time`: the severities actually hidden."""
    counts = result.hidden_by_severity
    shown = ", ".join(f"{counts[s]} {s}" for s in SEVERITIES if counts.get(s))
    return shown + (": the value is only known at run time" if shown.endswith(" info") else "")


