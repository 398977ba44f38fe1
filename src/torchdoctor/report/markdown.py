"""report.md: reads like a hand-written performance report, what to change first, first: one
line on the run (and a busy machine, when it was), the ranked causes with each cause's evidence,
fix and estimate; then the measurements: run summary, where the time goes, the tables, what
could not be measured, the environment and notes."""

from __future__ import annotations

from typing import Any

from torchdoctor.model.findings import Finding, Report, RunSummary, Table
from torchdoctor.report.common import (CHECKED_CAPTION, CHECKED_TITLE, DASH, busy_line, causes, checked,
                                       evidence_label, evidence_value, estimate_line, fmt_ms, fmt_share, fmt_speedup, fmt_value,
                                       headline, no_causes, split_rows, summary_rows, where)
from torchdoctor.report.mdtext import cell, code, heading, prose


def render_markdown(report: Report) -> str:
    findings = causes(report)
    out: list[str] = []
    out += _title(report)
    busy = report.summary.machine_busy if report.summary else None  # the run's busy line is the headline's
    warnings = [w for w in report.warnings if w != busy]
    out += [f"> **Warning:** {heading(w)}" for w in warnings] + ([""] if warnings else [])
    if report.summary:
        out += _headline(report.summary)
    if findings or report.source in ("run", "lint", "trace"):
        out += _ranked_table(findings, no_causes(report))
    for rank, finding in enumerate(findings, 1):
        out += _finding_section(f"{rank}. ", finding)
    out += _checked(checked(report))
    if report.summary:
        out += _run_summary(report.summary)
        out += _time_split(report.summary)
    for table in report.tables:
        out += _report_table(table)
    if report.not_measured:
        out += ["## Not measured in this run", ""]
        out += _table(("code", "cause", "why"),
                      [(code(n.code), code(n.slug), cell(n.reason)) for n in report.not_measured])
    if report.environment:
        out += ["## Environment", ""]
        out += _table(("", ""), [(cell(str(k)), _value_cell(v)) for k, v in report.environment.items()])
    if report.notes:
        out += ["## Notes", ""] + [f"- {heading(note)}" for note in report.notes] + [""]
    return "\n".join(out)


def _title(report: Report) -> list[str]:
    s = report.summary
    title = "torchdoctor report"
    if s and s.script:
        title += f": {code(s.script, in_table=False)}"
    byline = f"torchdoctor {cell(report.tool_version)} · source: {cell(report.source)}"
    return [f"# {title}", "", byline, ""]


def _headline(s: RunSummary) -> list[str]:
    out = [f"**{heading(headline(s))}**", ""]
    busy = busy_line(s)
    return out + ([f"**Busy machine:** {heading(busy)}", ""] if busy else [])


def _report_table(table: Table) -> list[str]:
    out = [f"## {heading(table.title)}", ""]
    out += _table(tuple(cell(c) for c in table.columns),
                  [tuple(cell(fmt_value(v)) for v in row) for row in table.rows])
    return out + ([prose(table.caption), ""] if table.caption else [])


def _run_summary(s: RunSummary) -> list[str]:
    rows = [(label, cell(value)) for label, value in summary_rows(s)]
    return ["## Run summary", ""] + _table(("", ""), rows)


def _time_split(s: RunSummary) -> list[str]:
    out = ["## Where a step's time goes", ""]
    if not s.steps_measured:
        return out + ["No measured steps, so there is no split.", ""]
    rows = [(label, fmt_ms(seconds), fmt_share(share)) for label, seconds, share in split_rows(s)]
    out += _table(("part", "per step", "share"), rows, align=("---", "---:", "---:"))
    out += [f"Host-side time per measured step, as a share of the mean step ({fmt_ms(s.step_time_s)}); "
            "warmup and sampled steps excluded.", ""]
    return out


def _ranked_table(findings: list[Finding], empty: str) -> list[str]:
    out = ["## Causes, ranked", ""]
    if not findings:
        return out + [empty, ""]
    rows = [(str(rank), code(f.code), code(f.slug), f.severity.value, _where_cell(f), fmt_speedup(f))
            for rank, f in enumerate(findings, 1)]
    return out + _table(("#", "code", "cause", "severity", "where", "est. speedup"), rows,
                        align=("---:", "---", "---", "---", "---", "---:"))


def _where_cell(f: Finding) -> str:
    return DASH if f.location is None else code(where(f.location))


def _checked(findings: list[Finding]) -> list[str]:
    """The info findings apart from the causes: a table, then each one's details."""
    if not findings:
        return []
    out = [f"## {CHECKED_TITLE}", "", prose(CHECKED_CAPTION), ""]
    out += _table(("code", "rule", "finding", "where"),
                  [(code(f.code), code(f.slug), cell(f.title), _where_cell(f)) for f in findings])
    for f in findings:
        out += _finding_section("", f)
    return out


def _finding_section(label: str, f: Finding) -> list[str]:
    out = [f"### {label}{cell(f.code)} {code(f.slug, in_table=False)}: {heading(f.title)}", ""]
    facts = [f"**Severity:** {f.severity.value}"]
    if f.location:
        function = f" in {code(f.location.function, in_table=False)}" if f.location.function else ""
        facts.append(f"**Where:** {code(where(f.location), in_table=False)}{function}")
    out += [" · ".join(facts), ""]
    if f.message:
        out += [prose(f.message), ""]
    if f.evidence:
        out += _table(("evidence", "value"), [(cell(evidence_label(str(k))), _evidence_cell(str(k), v))
                                              for k, v in f.evidence.items()])
    if f.fix:
        out += ["**Fix:**", "", prose(f.fix), ""]
    estimate, basis = estimate_line(f)
    basis = f" — basis: {heading(basis)}" if basis else ""
    out += [f"**Estimated speedup:** {estimate}{basis}", ""]
    return out


def _evidence_cell(key: str, value: Any) -> str:
    return _value_cell(value) if isinstance(value, (list, tuple, dict)) else cell(evidence_value(key, value))


def _value_cell(value: Any) -> str:
    # Lists and dicts print as JSON, which reads best (and escapes least) as code.
    return code(fmt_value(value)) if isinstance(value, (list, tuple, dict)) else cell(fmt_value(value))


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]],
           align: tuple[str, ...] | None = None) -> list[str]:
    """A GFM table; cells must already be escaped."""
    align = align or tuple("---" for _ in header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]
