"""Terminal output with rich: a compact summary, the ranked table, then each cause."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchdoctor.findings import Report
from torchdoctor.report.common import fmt_ms, fmt_speedup, split_rows, summary_rows, where

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def render_text(report: Report, color: bool = False, width: int = 110) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, color_system="standard" if color else None,
                      highlight=False, soft_wrap=False)
    s = report.summary
    if s:
        console.print(f"[bold]torchdoctor[/bold] · {escape(s.script)} · {escape(s.status)}")
        console.print("  " + " · ".join(f"{k}: {escape(v)}" for k, v in summary_rows(s)[2:8]))
        parts = [f"{label} {fmt_ms(sec)} ({share:.0%})" for label, sec, share in split_rows(s) if sec > 0]
        if parts:
            console.print("  step time: " + ", ".join(parts))
    if not report.findings:
        console.print("\nNo findings.")
    else:
        table = Table(title="Causes, ranked", title_justify="left", expand=False)
        for col in ("#", "code", "cause", "severity", "where", "est. speedup"):
            table.add_column(col, no_wrap=col != "cause")
        for i, f in enumerate(report.findings, 1):
            table.add_row(str(i), f.code, escape(f"{f.slug}: {f.title}"),
                          f"[{SEVERITY_STYLE[f.severity.value]}]{f.severity.value}[/]",
                          escape(where(f)), fmt_speedup(f))
        console.print(table)
        for i, f in enumerate(report.findings, 1):
            console.print(f"\n[bold]{i}. {f.code} {escape(f.slug)}[/bold] at {escape(where(f))}")
            console.print("   " + escape(f.message))
            console.print("   fix: " + escape(f.fix).replace("\n", "\n        "))
            console.print(f"   estimate: {fmt_speedup(f)} — {escape(f.estimate_basis)}")
    if report.not_measured:
        codes = ", ".join(n.code for n in report.not_measured)
        console.print(f"\nNot measured in this run: {codes} ({escape(report.not_measured[0].reason)})")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    return buffer.getvalue()
