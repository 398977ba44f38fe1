"""What every renderer promises: one signature, the empty report, hostile strings, ranking."""

import copy
import json
import re

import pytest
from helpers.reports import empty_report, full_report, hostile_report

from torchdoctor.report import RENDERERS, render


def test_the_four_contract_formats_are_registered():
    assert set(RENDERERS) == {"text", "md", "json", "html"}


def test_unknown_format_names_every_valid_one():
    with pytest.raises(ValueError) as err:
        render(full_report(), "pdf")
    assert "'pdf'" in str(err.value)
    assert all(fmt in str(err.value) for fmt in RENDERERS)


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_human_renderers_say_no_findings_for_an_empty_report(fmt):
    out = render(empty_report(), fmt)
    assert "No findings." in out
    assert "Run summary" not in out and "step time" not in out  # no summary, so none invented


def test_json_renderer_writes_an_empty_findings_list_for_an_empty_report():
    doc = json.loads(render(empty_report(), "json"))
    assert doc["findings"] == [] and doc["summary"] is None


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_renderers_do_not_change_the_report(fmt):
    report = full_report()
    before = copy.deepcopy(report)
    RENDERERS[fmt](report)
    assert report == before  # not even the findings' order: ranking happens on a copy


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_causes_are_printed_in_ranked_order(fmt):
    out = render(full_report(), fmt)
    expected = [f.code for f in full_report().ranked().findings]
    assert expected == ["TD301", "TD101", "TD201", "TD703"]  # speedups first, then severity
    # Each code's first appearance is in rank order (md: its row in the ranked table; text: the
    # top three in full, then the rest in a table).
    positions = [out.index(code) for code in expected]
    assert positions == sorted(positions)
    # ... and the numbered per-finding sections follow the same order (text: the top three).
    sections = re.findall(r"^(?:### )?(\d+)\. `?(TD\d+)", out, flags=re.MULTILINE)
    shown = expected if fmt == "md" else expected[:3]
    assert [code for _, code in sections] == shown
    assert [int(n) for n, _ in sections] == list(range(1, len(shown) + 1))


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_renderer_survives_hostile_strings(fmt):
    out = render(hostile_report(), fmt)
    assert "TD201" in out
