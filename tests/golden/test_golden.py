"""Golden files: each `case.py` is run under the doctor and its high/medium findings
(code, slug, line) must equal `expected.json`. Regenerate with `pytest --update-goldens`
after a deliberate change, and review the diff."""

import json
from pathlib import Path

import pytest

from torchdoctor.diagnosis.run import analyze
from torchdoctor.run.runner import RunRequest, execute

CASES = sorted(p.parent for p in Path(__file__).parent.glob("*/case.py"))


def strong_findings(case: Path, tmp_path: Path) -> list[dict]:
    record = execute(RunRequest(target=str(case / "case.py"), warmup=2, steps=25), tmp_path)
    assert record.run.status in ("step-limit", "completed"), record.run.error
    report = analyze(record)
    return sorted(
        ({"code": f.code, "slug": f.slug, "line": f.location.line if f.location else None}
         for f in report.findings if f.severity.value in ("high", "medium")),
        key=lambda f: (f["code"], f["line"] or 0),
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_its_golden_file(case, tmp_path, update_goldens):
    found = strong_findings(case, tmp_path)
    expected_file = case / "expected.json"
    if update_goldens:
        expected_file.write_text(json.dumps(found, indent=2) + "\n")
    assert found == json.loads(expected_file.read_text())
