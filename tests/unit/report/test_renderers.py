import json

import pytest

from torchdoctor.findings import Finding, Report, RunSummary, Severity
from torchdoctor.record import Location
from torchdoctor.report import RENDERERS, render
from torchdoctor.serialize import from_plain

HOSTILE = "a|b\n[red]x[/red] <script>"


def _finding(code, speedup, severity=Severity.MEDIUM, path="train.py"):
    return Finding(code=code, slug="s-" + code.lower(), severity=severity, title=f"title {code}",
                   message=HOSTILE, location=Location(path, 7, "f"), evidence={"k": HOSTILE},
                   fix="```python\nx = 1\n```", estimated_speedup=speedup, estimate_basis="basis")


def _report():
    summary = RunSummary(script=HOSTILE, status="step-limit", wall_s=1.0, steps_total=5, steps_measured=3,
                         step_time_s=0.1, step_time_p50_s=0.1, step_time_p90_s=0.1, steps_per_s=10.0,
                         samples_per_s=None)
    findings = [_finding("TD201", None, Severity.HIGH), _finding("TD101", 1.2), _finding("TD301", 1.7)]
    return Report(source="run", tool_version="0", summary=summary, findings=findings).ranked()


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_renderer_handles_an_empty_report(fmt):
    out = render(Report(source="run", tool_version="0"), fmt)
    assert out.strip()
    if fmt != "json":
        assert "No findings." in out


def test_ranking_puts_estimates_first_then_severity():
    assert [f.code for f in _report().findings] == ["TD301", "TD101", "TD201"]


def test_markdown_escapes_table_cells_and_html():
    md = render(_report(), "md")
    table_rows = [line for line in md.splitlines() if line.startswith("| k |")]
    assert table_rows and all("a\\|b" in row and "\n" not in row for row in table_rows)
    assert "<script>" not in md


def test_terminal_prints_markup_literally():
    text = render(_report(), "text")
    assert "[red]x[/red]" in text
    assert text.index("TD301") < text.index("TD101") < text.index("TD201")


def test_json_round_trips_to_an_equal_report():
    report = _report()
    assert from_plain(Report, json.loads(render(report, "json"))) == report


def test_unknown_format_names_the_valid_ones():
    with pytest.raises(ValueError, match="md"):
        render(_report(), "pdf")
