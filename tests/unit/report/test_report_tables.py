"""Tables a source adds to a report (trace breakdowns, comparisons) reach every renderer."""

import json

import pytest
from helpers.reports import HOSTILE, full_report

from torchdoctor.model.findings import Table
from torchdoctor.report import RENDERERS, render


def _with_table(title="GPU time", rows=None):
    report = full_report()
    report.tables.append(Table(title=title, columns=["part", "ms", "share"],
                               rows=rows or [["computing", 12.5, "41%"], ["idle", 17.25, "57%"]],
                               caption="From the trace's kernel intervals."))
    return report


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_renderer_shows_each_table_cell(fmt):
    out = render(_with_table(), fmt)
    for text in ("GPU time", "computing", "idle", "17.25"):
        assert text in out, f"{fmt} lost {text!r}"


def test_markdown_table_follows_the_causes_with_its_caption():
    md = render(_with_table(), "md")
    assert md.index("## Causes") < md.index("## GPU time")  # what to change first, first
    assert "| computing | 12.5 | 41% |" in md
    assert "From the trace's kernel intervals." in md


def test_json_keeps_table_values_typed():
    data = json.loads(render(_with_table(), "json"))
    assert data["tables"][0]["rows"][1] == ["idle", 17.25, "57%"]


def test_hostile_cells_do_not_break_markdown_rows():
    md = render(_with_table(title=HOSTILE, rows=[[HOSTILE, 1, "x|y"]]), "md")
    row = next(line for line in md.splitlines() if line.startswith("| ") and "x" in line and "| 1 |" in line
               and "TD" not in line)
    assert row.count(" | ") == 2  # three cells: the pipes in user text are escaped
