"""`torchdoctor report` on a tune directory re-renders tune's own report."""

import json

from helpers.reports import full_report

from torchdoctor.cli import main


def test_a_tune_directory_re_renders_from_its_tune_report(tmp_path, capsys):
    report = full_report()
    report.source = "tune"
    report.save(tmp_path / "tune.json")
    (tmp_path / "01-baseline").mkdir()  # trials are run directories of their own
    assert main(["report", str(tmp_path), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["source"] == "tune" and [f["code"] for f in shown["findings"]] == [f.code for f in report.ranked().findings]


def test_a_damaged_tune_report_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "tune.json").write_text('{"schema_version": 99}')
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot read the tune report" in err and "schema_version 99" in err
