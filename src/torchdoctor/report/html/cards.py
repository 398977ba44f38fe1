"""The ranked findings: an overview table, then one card per finding with the source lines
around its location, the evidence, the fix and the estimate with its basis."""

from __future__ import annotations

from torchdoctor.model.figures import SourceExcerpt
from torchdoctor.model.findings import Finding
from torchdoctor.report.common import DASH, estimate_line, evidence_label, evidence_value, fmt_speedup, where
from torchdoctor.report.html.text import code, esc, esc_line, inline, inline_line, prose


STATUSES = {"ok", "changed", "missing", "unreadable", "not-run-file"}


def overview(findings: list[Finding]) -> str:
    rows = []
    for rank, f in enumerate(findings, 1):
        sev = esc_line(f.severity.value)
        rows.append(f'<tr><td class="num"><a href="#finding-{rank}">{rank}</a></td><td>{code(f.code)}</td>'
                    f'<td>{code(f.slug)}</td><td><span class="badge sev-{sev}">{sev}</span></td>'
                    f'<td>{code(where(f.location)) if f.location else DASH}</td>'
                    f'<td class="num">{fmt_speedup(f)}</td></tr>')
    return ('<div class="table-wrap"><table class="grid ranked"><thead><tr><th class="num">#</th><th>code</th>'
            '<th>cause</th><th>severity</th><th>where</th><th class="num">est. speedup</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def card(rank: int, f: Finding, excerpt: SourceExcerpt | None, numbered: bool = True) -> str:
    """One finding in full; `rank` is its anchor, shown as its number when `numbered` (a cause)."""
    sev = esc_line(f.severity.value)
    number = f'<span class="rank">{rank}</span>' if numbered else ""
    parts = [f'<article class="finding sev-{sev}" id="finding-{rank}">',
             f'<header>{number}<span class="badge sev-{sev}">{sev}</span>'
             f'{code(f.code)} {code(f.slug)}<h3>{inline_line(f.title)}</h3></header>']
    if f.location:
        function = f" in {code(f.location.function)}" if f.location.function else ""
        parts.append(f'<p class="where">{code(where(f.location))}{function}</p>')
    if excerpt is not None:
        parts.append(source_excerpt(excerpt))
    if f.message:
        parts.append(prose(f.message))
    if f.evidence:
        rows = "".join(f"<tr><th>{esc_line(evidence_label(str(k)))}</th><td>{inline_line(evidence_value(str(k), v))}</td></tr>"
                       for k, v in f.evidence.items())
        parts.append(f'<h4>Evidence</h4><table class="grid evidence"><tbody>{rows}</tbody></table>')
    if f.fix:
        parts.append(f"<h4>Fix</h4>{prose(f.fix)}")
    estimate, basis = estimate_line(f)
    basis = f'<span class="basis"> — {inline(basis)}</span>' if basis else ""
    parts.append(f'<p class="estimate"><strong>Estimated speedup: {estimate}</strong>{basis}</p></article>')
    return "".join(parts)


def source_excerpt(excerpt: SourceExcerpt) -> str:
    status = excerpt.status if excerpt.status in STATUSES else "other"  # a class name never comes from the data
    note = f'<p class="source-note status-{status}">{inline(excerpt.note)}</p>' if excerpt.note else ""
    if not excerpt.lines:
        return note
    lines = []
    for number, text in enumerate(excerpt.lines, excerpt.first_line):
        hit = " hit" if number == excerpt.line else ""
        lines.append(f'<span class="line{hit}"><span class="ln">{number}</span>{esc(text) or " "}</span>')
    last = excerpt.first_line + len(excerpt.lines) - 1
    caption = f"{esc_line(excerpt.path)}, lines {excerpt.first_line}–{last}"
    return (f'<figure class="source status-{status}"><figcaption>{caption}</figcaption>'
            f'{note}<pre><code>{"".join(lines)}</code></pre></figure>')
