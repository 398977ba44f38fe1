"""Terminal output with rich: what to change first, first. One line on the run, the top
causes in full, the rest in a table, then the measurements (summary, tables, what was not
measured, notes).

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
from torchdoctor.report.common import (CHECKED_CAPTION, CHECKED_TITLE, NOT_MEASURED, busy_line, causes, checked, fmt_ms,
                                       estimate_line, fmt_share, fmt_speedup, fmt_value, headline, no_causes, one_line, plain,
                                       split_rows, summary_rows, where)

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
INDENT = 3  # per-finding details sit under their heading
BOLD = "bold"


TOP_IN_FULL = 3  # causes printed in full on the first screen; the rest are rows of a table


def render_text(report: Report, color: bool = False, width: int = 100) -> str:
    """What to change first, first: one line on the run (and a busy machine, when it was),
    the top causes in full, the rest in a table; then the measurements they rest on."""
    buffer = io.StringIO()
    console = _console(buffer, color, width)
    busy = report.summary.machine_busy if report.summary else None
    for warning in report.warnings:  # before anything it makes less reliable (the run's busy line is the headline's)
        if warning != busy:
            _print_indented(console, Text.assemble(("warning: ", "bold yellow"), plain(warning)), 0)
    findings = causes(report)
    if report.summary:
        _print_headline(console, report.summary)
    if findings:
        console.print()
        console.print(Text("Causes, ranked", style=BOLD))
    for rank, finding in enumerate(findings[:TOP_IN_FULL], 1):
        _print_finding(console, rank, finding)
    if len(findings) > TOP_IN_FULL:
        console.print()
        _print_grid(console, _ranked_table(findings, TOP_IN_FULL), width)
    if not findings and report.source in ("run", "lint", "trace"):  # a comparison's content is its tables
        console.print(no_causes(report))
    _print_checked(console, checked(report))
    if report.summary:
        _print_summary(console, report.summary)
    for table in report.tables:
        _print_report_table(console, table, width)
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


def _print_headline(console: Console, s: RunSummary) -> None:
    severity = SEVERITY_STYLE["high"] if s.status in ("crashed", "stalled") else ""
    console.print(Text.assemble(("torchdoctor", BOLD), " · ", (one_line(headline(s)), severity)))
    busy = busy_line(s)
    if busy:
        _print_indented(console, Text.assemble(("busy machine: ", BOLD), plain(busy)), 2)


def _print_report_table(console: Console, table: ReportTable, width: int) -> None:
    console.print()
    grid = [[one_line(c) for c in table.columns], *[[one_line(fmt_value(v)) for v in row] for row in table.rows]]
    _print_grid(console, (one_line(table.title), grid, set()), width)
    if table.caption:
        _print_indented(console, plain(table.caption), 0)


def _print_grid(console: Console, grid: tuple[str, list[list], set[int]], width: int) -> None:
    """A titled table whose header words are never broken: as a grid where every column can be
    as wide as the longest word of its header, else one indented line per row ("header: value").
    `grid`: (title, [header, *rows], the columns right-aligned); cells are str or Text."""
    title, (header, *rows), right = grid
    minimums = [max(len(word) for word in (str(h).split() or [""])) for h in header]
    if sum(minimums) + 3 * len(header) + 1 > width:
        console.print(Text(title, style=BOLD))
        for row in rows:
            pairs = [Text.assemble(f"{h}: ", cell if isinstance(cell, Text) else str(cell))
                     for h, cell in zip(header, row)]
            _print_indented(console, Text(" · ").join(pairs), 2)
        return
    table = Table(title=title, title_justify="left", title_style=BOLD, expand=False)
    for i, (name, minimum) in enumerate(zip(header, minimums)):
        table.add_column(name, min_width=minimum, overflow="fold", justify="right" if i in right else "left")
    for row in rows:
        table.add_row(*(cell if isinstance(cell, Text) else str(cell) for cell in row))
    console.print(table)


def _console(buffer: io.StringIO, color: bool, width: int) -> Console:
    # Explicit settings so the output does not depend on the environment (FORCE_COLOR,
    # NO_COLOR, COLUMNS, a Jupyter kernel): tests and saved logs see the same text.
    return Console(file=buffer, width=width, force_terminal=color, force_jupyter=False,
                   color_system="standard" if color else None, no_color=not color,
                   highlight=False, emoji=False, markup=False, legacy_windows=False)


def _print_summary(console: Console, s: RunSummary) -> None:
    console.print()
    console.print(Text("Run summary", style=BOLD))
    # On a CPU run the GPU rows would only say "not measured": leave them out of the terminal.
    rows = [f"{label}: {one_line(value)}" for label, value in summary_rows(s) if value != NOT_MEASURED]
    _print_indented(console, Text(" · ".join(rows)), 2)
    if s.steps_measured:
        parts = [f"{label} {fmt_ms(seconds)} ({fmt_share(share)})"
                 for label, seconds, share in split_rows(s) if seconds > 0]
        if parts:
            _print_indented(console, Text("step time: " + ", ".join(parts)), 2)


def _ranked_table(findings: list[Finding], skip: int = 0) -> tuple[str, list[list], set[int]]:
    """The causes after the first `skip` (those are printed in full above it)."""
    title = "Causes, ranked" if not skip else f"More causes, ranked ({len(findings) - skip} after the top {skip})"
    rows: list[list] = [["#", "code", "cause", "severity", "where", "est. speedup"]]
    for rank, f in enumerate(findings[skip:], skip + 1):
        rows.append([str(rank), one_line(f.code), one_line(f.slug),
                     Text(f.severity.value, style=SEVERITY_STYLE.get(f.severity.value, "")),
                     one_line(where(f.location)), fmt_speedup(f)])
    return title, rows, {0, 5}


def _print_finding(console: Console, rank: int, f: Finding) -> None:
    console.print()
    name = f"{rank}. {one_line(f.code)} {one_line(f.slug)}"
    severity = SEVERITY_STYLE.get(f.severity.value, "")
    console.print(Text.assemble((name, f"{BOLD} {severity}".strip()), " · ", (f.severity.value, severity)))
    _print_indented(console, Text(one_line(f.title), style=BOLD))  # its own line: a long title wraps under itself
    if f.location:
        function = f" in {one_line(f.location.function)}" if f.location.function else ""
        _print_indented(console, Text.assemble("where: ", one_line(where(f.location)), function))
    if f.message:
        _print_indented(console, Text(plain(f.message)))
    if f.fix:
        _print_indented(console, Text("fix:", style=BOLD))
        _print_indented(console, Text(plain(f.fix)), INDENT + 2)
    estimate, basis = estimate_line(f)
    basis = f" — {plain(basis)}" if basis else ""
    _print_indented(console, Text.assemble("estimated speedup: ", estimate, basis))


def _print_checked(console: Console, findings: list[Finding]) -> None:
    """The info findings, a line each: what was looked at and is not a cost to change."""
    if not findings:
        return
    console.print()
    console.print(Text(CHECKED_TITLE, style=BOLD))
    _print_indented(console, Text(CHECKED_CAPTION, style=SEVERITY_STYLE["info"]), 2)
    for f in findings:
        at = f" · {one_line(where(f.location))}" if f.location else ""
        _print_indented(console, Text.assemble((f"{one_line(f.code)} {one_line(f.slug)}", BOLD), at, " — ",
                                               one_line(f.title)), 2)


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
