"""report.json: the DESIGN §3 shape, loadable back into an equal Report."""

import json

from helpers.reports import full_report, hostile_report

from torchdoctor.model.findings import SCHEMA_VERSION, Report
from torchdoctor.report.json_ import render_json
from torchdoctor.model.serialize import from_plain

FINDING_KEYS = {"code", "slug", "severity", "title", "message", "location", "evidence", "fix",
                "estimated_speedup", "estimate_basis"}


def test_round_trips_to_an_equal_report():
    for report in (full_report().ranked(), hostile_report()):
        assert from_plain(Report, json.loads(render_json(report))) == report


def test_has_the_contract_shape():
    doc = json.loads(render_json(full_report()))
    assert doc["schema_version"] == SCHEMA_VERSION == 4
    assert doc["summary"]["steps_measured"] == 30
    assert all(set(f) == FINDING_KEYS for f in doc["findings"])
    by_code = {f["code"]: f for f in doc["findings"]}
    assert by_code["TD301"]["location"] == {"path": "model.py", "line": 42, "function": "_apply_prompt"}
    assert by_code["TD101"]["location"] is None
    assert by_code["TD201"]["estimated_speedup"] is None
    assert by_code["TD201"]["severity"] == "high"


def test_findings_are_in_ranked_order_even_from_an_unranked_report():
    doc = json.loads(render_json(full_report()))
    assert [f["code"] for f in doc["findings"]] == [f.code for f in full_report().ranked().findings]


def test_matches_the_file_report_save_writes(tmp_path):
    report = full_report().ranked()
    report.save(tmp_path / "report.json")
    assert render_json(report) == (tmp_path / "report.json").read_text(encoding="utf-8")
