"""Info findings (a read the host needs, a verdict, a candidate with nothing to rank it by) are not
causes: every human report lists them apart from "Causes, ranked", so a rank always means "change
this before that". report.json keeps every finding, ranked, as its contract says."""

import json
import re

from helpers.reports import finding, summary

from torchdoctor.model.findings import Report, Severity
from torchdoctor.model.location import Location
from torchdoctor.report.html import render_html
from torchdoctor.report.json_ import render_json
from torchdoctor.report.markdown import render_markdown
from torchdoctor.report.terminal import render_text

NEEDED = "`.cpu()` would sync the GPU 4x per step (the host needs the value)"


def _report(*findings) -> Report:
    return Report(source="run", tool_version="0.1", summary=summary(), findings=list(findings))


def _cause():
    return finding("TD301", 1.4, Severity.MEDIUM, location=Location("train.py", 42, "get_batch"))


def _info():
    return finding("TD201", None, Severity.INFO, location=Location("train.py", 170, "main"), title=NEEDED,
                   slug="host-sync")


def _between(text: str, start: str, end: str | None) -> str:
    body = text[text.index(start):]
    return body[:body.index(end)] if end and end in body else body


def test_terminal_lists_info_apart_from_the_ranked_causes():
    text = render_text(_report(_info(), _cause()), width=140)
    ranked = _between(text, "Causes, ranked", "Checked, not causes")
    assert "TD301" in ranked and "TD201" not in ranked and NEEDED not in ranked
    checked = _between(text, "Checked, not causes", "Run summary")
    assert "TD201 host-sync · train.py:170 — " + NEEDED in checked
    assert not re.search(r"^\s*2\. ", text, re.M)  # the info finding has no rank


def test_terminal_with_only_info_findings_says_no_causes_not_no_findings():
    text = render_text(_report(_info()), width=160)
    assert "No causes found." in text and "No findings." not in text and "Causes, ranked\n\n1." not in text
    assert NEEDED in _between(text, "Checked, not causes", None)


def test_markdown_ranks_causes_only_and_details_info_below():
    md = render_markdown(_report(_info(), _cause()))
    ranked = _between(md, "## Causes, ranked", "## Checked, not causes")
    assert "TD301" in ranked and "TD201" not in ranked
    checked = _between(md, "## Checked, not causes", "## Run summary")
    assert "| `TD201` | `host-sync` |" in checked and re.search(r"^### `?TD201", checked, re.M)


def test_html_has_a_checked_section_with_unnumbered_cards_and_unique_anchors():
    page = render_html(_report(_info(), _cause()))
    ranked = _between(page, 'id="findings"', 'id="checked"')
    assert "TD301" in ranked and "TD201" not in ranked
    checked = _between(page, 'id="checked"', 'id="run-summary"')
    assert "TD201" in checked and 'class="rank"' not in checked
    anchors = re.findall(r'id="finding-(\d+)"', page)
    assert sorted(anchors) == ["1", "2"]


def test_json_keeps_every_finding_in_ranked_order():
    data = json.loads(render_json(_report(_info(), _cause())))
    assert [f["code"] for f in data["findings"]] == ["TD301", "TD201"]
