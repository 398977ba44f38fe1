"""report.html: one self-contained page (no script, no network) drawn from a Report.

`render_html(report)` is the renderer (`--format html`, report.html in a run directory);
`render_html_fragment(report)` is the same content as one `<div>` with its own scoped
style, for places that embed it (a notebook's `_repr_html_`). Sections live in `sections`.
"""

from __future__ import annotations

from torchdoctor.model.findings import Report
from torchdoctor.report.common import busy_line, headline, one_line
from torchdoctor.report.html.sections import SECTIONS, Section
from torchdoctor.report.html.style import CSS
from torchdoctor.report.html.text import esc_line, inline_line, note, prose

# No script, no fetch of any kind; only the inline styles this page carries.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
# The page around the report takes the report's background, so dark mode has no white margins.
PAGE_CSS = ("body{margin:0;background:#fff}"
            "@media (prefers-color-scheme: dark){body{background:#0d1117}}@media print{body{background:#fff}}")
TITLES = {"run": "torchdoctor report", "compare": "torchdoctor compare", "tune": "torchdoctor tune",
          "trace": "torchdoctor trace", "lint": "torchdoctor lint"}


def render_html(report: Report) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="color-scheme" content="light dark">'
            f"<title>{esc_line(_title(report))}</title><style>{CSS}{PAGE_CSS}</style></head>"
            f"<body>{_content(report)}</body></html>\n")


def render_html_fragment(report: Report) -> str:
    return f"<style>{CSS}</style>{_content(report)}"


def _title(report: Report) -> str:
    title = TITLES.get(report.source, "torchdoctor")
    if report.summary and report.summary.script:
        title += f": {one_line(report.summary.script)}"
    return title


def _content(report: Report) -> str:
    sections = [section for build in SECTIONS if (section := _build(build, report)) is not None]
    nav = "".join(f'<li><a href="#{s.id}">{esc_line(s.title)}</a></li>' for s in sections)
    body = "".join(f'<section id="{s.id}"><h2>{esc_line(s.title)}</h2>{s.body}</section>' for s in sections)
    byline = f"torchdoctor {esc_line(report.tool_version)} · {esc_line(report.source)} report"
    return (f'<div class="tdr"><header><h1>{esc_line(_title(report))}</h1><p class="byline">{byline}</p>'
            f"{_headline(report)}{_warnings(report)}</header><nav><ol>{nav}</ol></nav>{body}<footer>Made by torchdoctor "
            "from measurements of this run; the page runs no script and loads nothing.</footer></div>")


def _headline(report: Report) -> str:
    """One line on the run and, when it was, the busy machine: above the causes."""
    s = report.summary
    if s is None:
        return ""
    status = "failed" if s.status in ("crashed", "stalled") else "ok"
    out = f'<p class="run-line run-{status}">{inline_line(headline(s))}</p>'
    busy = busy_line(s)
    return out + (f'<p class="busy"><strong>Busy machine:</strong> {inline_line(busy)}</p>' if busy else "")


def _warnings(report: Report) -> str:
    """Warnings other than the busy machine's, which the headline already says (a comparison's)."""
    busy = report.summary.machine_busy if report.summary else None
    return "".join(f'<p class="warning" role="alert"><strong>Warning:</strong> {prose(w)}</p>'
                   for w in report.warnings if w != busy)


def _build(build, report: Report) -> Section | None:
    try:
        return build(report)
    except Exception as exc:  # one section that cannot be drawn must not cost the rest of the page
        name = build.__name__.replace("_", "-")
        return Section(name, name.replace("-", " ").capitalize(),
                       note(f"this section could not be drawn: {type(exc).__name__}: {exc}", "not-measured"))
