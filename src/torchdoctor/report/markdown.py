"""report.md: reads like the reference reports — summary table, where the time goes,
ranked causes, then each cause with evidence, fix and estimate, then the environment."""

from __future__ import annotations

import json

from torchdoctor.findings import Report
from torchdoctor.report.common import fmt_ms, fmt_speedup, split_rows, summary_rows, where


def cell(value) -> str:
    """A user string made safe inside a Markdown table cell."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ").replace("<", "&lt;")


def text(value: str) -> str:
    """A user string made safe in running Markdown text (no raw HTML)."""
    return value.replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(report: Report) -> str:
    out: list[str] = []
    s = report.summary
    title = f"torchdoctor report: `{cell(s.script)}`" if s else f"torchdoctor report ({report.source})"
    out += [f"# {title}", ""]
    if s:
        out += ["## Run summary", "", "| | |", "|---|---|"]
        out += [f"| {k} | {cell(v)} |" for k, v in summary_rows(s)]
        out += ["", "## Where a step's time goes", "", "| part | per step | share |", "|---|---:|---:|"]
        out += [f"| {label} | {fmt_ms(sec)} | {share:.0%} |" for label, sec, share in split_rows(s)]
        out += ["", "Host-side time per measured step (sampled steps excluded).", ""]
    out += ["## Causes, ranked", ""]
    if not report.findings:
        out += ["No findings.", ""]
    else:
        out += ["| # | code | cause | severity | where | est. speedup |", "|---|---|---|---|---|---:|"]
        for i, f in enumerate(report.findings, 1):
            out.append(f"| {i} | {f.code} | {cell(f.slug)} | {f.severity.value} | {cell(where(f))} | {fmt_speedup(f)} |")
        out.append("")
        for i, f in enumerate(report.findings, 1):
            out += [f"### {i}. {f.code} {f.slug}: {text(f.title)}", ""]
            if f.location:
                fn = f" in `{cell(f.location.function)}`" if f.location.function else ""
                out += [f"**Where:** `{cell(where(f))}`{fn}", ""]
            out += [text(f.message), ""]
            if f.evidence:
                out += ["| evidence | value |", "|---|---|"]
                out += [f"| {cell(k)} | {cell(v)} |" for k, v in f.evidence.items()]
                out.append("")
            out += ["**Fix:**", "", f.fix, ""]
            out += [f"**Estimated speedup:** {fmt_speedup(f)} — {text(f.estimate_basis)}", ""]
    if report.not_measured:
        out += ["## Not measured in this run", "", "| code | cause | why |", "|---|---|---|"]
        out += [f"| {n.code} | {cell(n.slug)} | {cell(n.reason)} |" for n in report.not_measured]
        out.append("")
    if report.environment:
        out += ["## Environment", "", "| | |", "|---|---|"]
        out += [f"| {cell(k)} | {cell(v)} |" for k, v in report.environment.items()]
        out.append("")
    if report.notes:
        out += ["## Notes", ""] + [f"- {text(n)}" for n in report.notes] + [""]
    return "\n".join(out)
