"""Terminal output with rich: a compact summary, the ranked table, then each cause.

User strings (paths, function names, messages) never pass through rich's markup parser:
every line is assembled from `Text` pieces, our own styled and the user's plain. That is
stricter than `rich.markup.escape`, which still mangles a string ending in a backslash
(`C:\\data\\` would print with its last backslash doubled). Emoji codes are off too, so a
`:fire:` in a message stays text, and control characters (ESC) are shown, not sent.
Strings that must stay on one line (paths, names, titles) go through `one_line`, the rest
(messages, fixes) through `plain`.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from torchdoctor.model.findings import Finding, NotMeasured, Report, RunSummary
from torchdoctor.model.findings import Table as ReportTable
from torchdoctor.report.common import (NOT_MEASURED, fmt_ms, fmt_value, fmt_share, fmt_speedup, one_line, plain,
                                       ranked_findings, split_rows, summary_rows, where)

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
INDENT = 3  # per-finding details sit under their heading
BOLD = "bold"


def render_text(report: Report, color: bool = False, width: int = 100) -> str:
    buffer = io.StringIO()
    console = _console(buffer, color, width)
    for warning in report.warnings:  # before anything it makes less reliable
        _print_indented(console, Text.assemble(("warning: ", "bold yellow"), plain(warning)), 0)
    if report.summary:
        _print_summary(console, report.summary)
    for table in report.tables:
        _print_report_table(console, table)
    findings = ranked_findings(report)
    if findings:
        console.print(_ranked_table(findings))
        for rank, finding in enumerate(findings, 1):
            _print_finding(console, rank, finding)
    elif report.source in ("run", "lint", "trace"):  # a comparison's content is its tables
        console.print("No findings.")
    if report.not_measured:
        _print_not_measured(console, report.not_measured)
    if report.notes:
        console.print()
        for note in report.notes:
            _print_indented(console, Text.assemble("note: ", plain(note)), 0)
    # rich pads lines to the width of their block; trailing blanks only clutter logs and diffs.
    lines = buffer.getvalue().split("\n")
    if lines and not lines[-1]:
        lines.pop()
    return "".join(line.rstrip() + "\n" for line in lines)


def _print_report_table(console: Console, table: ReportTable) -> None:
    grid = Table(title=one_line(table.title), title_justify="left", title_style=BOLD)
    for column in table.columns:
        grid.add_column(one_line(column), overflow="fold")  # wrapped, never cut: a path keeps its line number
    for row in table.rows:
        grid.add_row(*(one_line(fmt_value(v)) for v in row))
    console.print(grid)
    if table.caption:
        _print_indented(console, plain(table.caption), 0)


def _console(buffer: io.StringIO, color: bool, width: int) -> Console:
    # Explicit settings so the output does not depend on the environment (FORCE_COLOR,
    # NO_COLOR, COLUMNS, a Jupyter kernel): tests and saved logs see the same text.
    return Console(file=buffer, width=width, force_terminal=color, force_jupyter=False,
                   color_system="standard" if color else None, no_color=not color,
                   highlight=False, emoji=False, markup=False, legacy_windows=False)


def _print_summary(console: Console, s: RunSummary) -> None:
    headline = Text.assemble(("torchdoctor", BOLD), " · ", one_line(s.script), " · ", one_line(s.status))
    console.print(headline)
    # On a CPU run the GPU rows would only say "not measured": leave them out of the terminal.
    rows = [f"{label}: {one_line(value)}" for label, value in summary_rows(s)
            if label != "status" and value != NOT_MEASURED]
    _print_indented(console, Text(" · ".join(rows)), 2)
    if s.steps_measured:
        parts = [f"{label} {fmt_ms(seconds)} ({fmt_share(share)})"
                 for label, seconds, share in split_rows(s) if seconds > 0]
        if parts:
            _print_indented(console, Text("step time: " + ", ".join(parts)), 2)
    console.print()


def _ranked_table(findings: list[Finding]) -> Table:
    table = Table(title="Causes, ranked", title_justify="left", title_style=BOLD, expand=False)
    table.add_column("#", justify="right")
    table.add_column("code", no_wrap=True)
    table.add_column("cause", overflow="fold")
    table.add_column("severity", no_wrap=True)
    table.add_column("where", overflow="fold")
    table.add_column("est. speedup", justify="right", no_wrap=True)
    for rank, f in enumerate(findings, 1):
        table.add_row(str(rank), Text(one_line(f.code)), Text(one_line(f.slug)),
                      Text(f.severity.value, style=SEVERITY_STYLE.get(f.severity.value, "")),
                      Text(one_line(where(f.location))), fmt_speedup(f))
    return table


def _print_finding(console: Console, rank: int, f: Finding) -> None:
    console.print()
    name = f"{rank}. {one_line(f.code)} {one_line(f.slug)}"
    severity = SEVERITY_STYLE.get(f.severity.value, "")
    console.print(Text.assemble((name, f"{BOLD} {severity}".strip()), " · ", one_line(f.title)))
    if f.location:
        function = f" in {one_line(f.location.function)}" if f.location.function else ""
        _print_indented(console, Text.assemble("where: ", one_line(where(f.location)), function))
    if f.message:
        _print_indented(console, Text(plain(f.message)))
    if f.fix:
        _print_indented(console, Text("fix:", style=BOLD))
        _print_indented(console, Text(plain(f.fix)), INDENT + 2)
    estimate = fmt_speedup(f) if f.estimated_speedup is not None else "not estimated"
    basis = f" — {plain(f.estimate_basis)}" if f.estimate_basis else ""
    _print_indented(console, Text.assemble("estimated speedup: ", estimate, basis))


def _print_not_measured(console: Console, not_measured: list[NotMeasured]) -> None:
    console.print()
    console.print(Text("Not measured in this run", style=BOLD))
    # Most share one reason (e.g. "needs a CUDA device"): say it once per group, not per rule.
    by_reason: dict[str, list[str]] = {}
    for n in not_measured:
        by_reason.setdefault(plain(n.reason), []).append(f"{one_line(n.code)} {one_line(n.slug)}")
    for reason, rules in by_reason.items():
        if len(rules) == 1:
            _print_indented(console, Text(f"{rules[0]}: {reason}"), 2)
        else:
            _print_indented(console, Text(f"{reason}:"), 2)
            _print_indented(console, Text(", ".join(rules)), 4)


def _print_indented(console: Console, text: Text, indent: int = INDENT) -> None:
    # Padding keeps wrapped continuation lines under the first one.
    console.print(Padding(text, (0, 0, 0, indent), expand=False))
