"""The Python API `run` uses, and the lint registry's place in the catalogue."""

from helpers.lint_files import write

from torchdoctor.model.findings import Finding, Severity
from torchdoctor.lint import lint_files
from torchdoctor.lint.engine import lint_checks
from torchdoctor.rules.docs import rules_table
from torchdoctor.rules.registry import CATALOGUE, detected_codes, engines_for, rule_by_code

CHECKS, DETECTED_CODES = lint_checks(), detected_codes("lint")


def test_lint_files_returns_findings_of_every_severity_in_line_order(tmp_path):
    path = write(tmp_path, """
import argparse
import torch
from torch.utils.data import DataLoader
p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0)
args = p.parse_args()
loader = DataLoader(ds, num_workers=args.workers)
for x in loader:
    model(x).backward()
    opt.step()
    print(x.sum().item())  # noqa: TD201
    torch.cuda.synchronize()
""")
    findings = lint_files([path, tmp_path / "missing.py"])
    assert all(isinstance(f, Finding) for f in findings)
    assert [(f.code, f.location.line, f.severity) for f in findings] == [
        ("TD105", 7, Severity.INFO), ("TD204", 12, Severity.MEDIUM)]
    assert findings[1].location.function == "<module>"


def test_every_lint_code_is_in_the_catalogue_and_shown_as_found_by_lint():
    assert DETECTED_CODES <= {r.code for r in CATALOGUE}
    assert DETECTED_CODES == {code for check in CHECKS for code in check.codes}
    for code in DETECTED_CODES:
        assert "lint" in engines_for(code)
        assert f"{code}  {rule_by_code(code).slug}" in rules_table()


def test_catalogue_only_causes_are_found_by_some_engine_now():
    for code in ("TD105", "TD704"):
        assert engines_for(code) == ["lint"]
    assert engines_for("TD405") == ["run", "lint"]  # a run reads Dynamo's own recompiles (rules/compile.py)
    assert engines_for("TD406") == ["run"]
    assert engines_for("TD604") == ["run", "lint"]  # a run sees nn.DataParallel and each replica's memory
    for code in ("TD601", "TD603"):  # measured in multi-rank runs too (rules/distributed.py)
        assert engines_for(code) == ["run", "lint"]
    assert engines_for("TD607") == ["run", "lint", "comm"]  # `torchdoctor comm` reads the same settings


def test_a_failing_check_costs_its_findings_for_that_file_only(tmp_path, monkeypatch):
    from torchdoctor.lint.checks.explicit_sync import ExplicitSync

    def broken(self, facts):
        raise KeyError("boom")
    monkeypatch.setattr(ExplicitSync, "run", broken)
    path = write(tmp_path, "import torch\nfor x in loader:\n    model(x).backward()\n    opt.step()\n"
                           "    torch.cuda.synchronize()\n    print(x.sum().item())\n")
    from torchdoctor.lint import LintOptions, lint_paths
    result = lint_paths([path], LintOptions(isolated=True, jobs=1), cwd=tmp_path)
    assert [f.code for f in result.findings] == ["TD201"]
    assert "internal error in ExplicitSync" in result.problems[0].message and result.files_linted == 1
