"""Golden files for `torchdoctor lint`: each case folder holds a `case.py` (or `case.ipynb`)
with code that must trigger a rule and code that must not, and `expected.txt` with every
finding at every severity. Regenerate with `pytest --update-goldens` and review the diff."""

from pathlib import Path

import pytest

from torchdoctor.lint import LintOptions, lint_paths
from torchdoctor.lint.engine import lint_checks
from torchdoctor.rules.registry import detected_codes, rule_by_code

CHECKS, DETECTED_CODES = lint_checks(), detected_codes("lint")

HERE = Path(__file__).parent
CASES = sorted(p.parent for p in HERE.glob("*/case.*") if p.suffix in (".py", ".ipynb"))


def render(case: Path) -> str:
    source = next(p for p in case.glob("case.*") if p.suffix in (".py", ".ipynb"))
    result = lint_paths([source], LintOptions(isolated=True, min_severity="info", jobs=1), cwd=case)
    lines = [f"{f.path}{f':cell {f.cell}' if f.cell else ''}:{f.line}:{f.column}: {f.code} {f.finding.slug} "
             f"[{f.finding.severity.value}]{' [fixable]' if f.fixable else ''}: {f.finding.message}"
             for f in result.findings]
    lines += [f"problem: {p}" for p in result.problems]
    return "\n".join(lines) + "\n" if lines else ""


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_its_golden_file(case, update_goldens):
    found = render(case)
    expected_file = case / "expected.txt"
    if update_goldens:
        expected_file.write_text(found)
    assert found == expected_file.read_text()


def _golden_codes() -> dict[str, set[str]]:
    codes: dict[str, set[str]] = {}
    for case in CASES:
        for line in (case / "expected.txt").read_text().splitlines():
            if not line.startswith("problem:"):
                codes.setdefault(line.split(": ", 1)[1].split()[0], set()).add(case.name)
    return codes


def test_every_check_has_a_golden_case_and_every_code_triggers_in_its_own():
    codes = _golden_codes()
    for check in CHECKS:
        for code in check.codes:
            assert code in codes, f"{type(check).__name__} emits {code}, which no golden case shows"
    for code in DETECTED_CODES:
        own = [c for c in CASES if c.name.startswith(code.lower())]
        assert own and own[0].name in codes.get(code, set()), f"{code} needs its own case folder"


def test_clean_cases_report_nothing():
    for case in CASES:
        if case.name.startswith("clean_"):
            assert (case / "expected.txt").read_text() == "", case.name


def test_lint_findings_carry_catalogue_metadata():
    for case in CASES:
        source = next(case.glob("case.*"))
        for item in lint_paths([source], LintOptions(isolated=True, min_severity="info", jobs=1)).findings:
            rule = rule_by_code(item.code)
            assert (item.finding.slug, item.finding.fix) == (rule.slug, rule.fix)
            assert item.finding.estimated_speedup is None
            assert "static" in item.finding.estimate_basis and "torchdoctor run" in item.finding.estimate_basis
