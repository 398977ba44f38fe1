"""`python3 dev.py gpu --dry-run`, the form CI runs: the plan, every step script imported, every
path checked; and the import check it relies on, which must never run a training script."""

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.gpucheck import dryrun, importcheck
from benchmarks.gpucheck.plan import STEPS

ROOT = Path(__file__).resolve().parents[3]


def test_dry_run_checks_every_step_script_and_path_and_exits_0():
    done = subprocess.run([sys.executable, "dev.py", "gpu", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for step in STEPS:
        assert f"{step.name} (" in out  # the plan names every step with its budget
        for script in step.scripts:
            assert f"ok   imports: {script}\n" in out
    assert f"ok   paths: {len(dryrun.needed_paths())} checked, all exist" in out
    assert "ok   compiles, imports resolve: examples/gpu_fp32_matmul.py" in out
    assert "ok   gpu-marked tests collected:" in out and "tests/integration/test_gpu_runs.py" in out
    assert out.rstrip().endswith("dry run: every check passed")


def test_needed_paths_cover_every_step_script_and_input():
    needed = set(dryrun.needed_paths())
    for step in STEPS:
        assert set(step.scripts) | set(step.needs) <= needed
    assert "tests/fixtures/real/README.md" in needed


def _rows(capsys) -> dict:
    return {Path(row["path"]).name: row for row in map(json.loads, capsys.readouterr().out.splitlines())}


def test_import_check_imports_step_scripts_and_never_runs_training_scripts(tmp_path, capsys):
    good = tmp_path / "good_step.py"
    good.write_text("import json\n\nif __name__ == '__main__':\n    raise SystemExit('ran')\n")
    bad = tmp_path / "bad_step.py"
    bad.write_text("import json\nfrom torchdoctor.no_such_module import thing\n")
    marker = tmp_path / "ran.txt"
    trains = tmp_path / "trains_at_import.py"
    trains.write_text(f"import torch\nfrom pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    broken = tmp_path / "broken_example.py"
    broken.write_text("import torch\nimport a_package_nobody_installed\n")
    code = importcheck.main(["--import", str(good), str(bad), "--resolve", str(trains), str(broken)])
    rows = _rows(capsys)
    assert code == 1
    assert rows["good_step.py"]["ok"] and rows["trains_at_import.py"]["ok"]
    assert not marker.exists()  # resolved, not executed
    assert "torchdoctor.no_such_module" in rows["bad_step.py"]["error"]
    assert "a_package_nobody_installed" in rows["broken_example.py"]["error"]


def test_import_check_reports_a_syntax_error_as_not_importable(tmp_path, capsys):
    example = tmp_path / "typo.py"
    example.write_text("for x in range(3)\n    pass\n")
    assert importcheck.main(["--resolve", str(example)]) == 1
    assert _rows(capsys)["typo.py"]["error"].startswith("SyntaxError")


class _Parsed(Exception):
    """Raised in place of running a step once its script has read its options."""


def _script_main(argv: list[str]):
    """The `main(argv)` of a step's script, and the options after it, from the step's argv."""
    import importlib
    import runpy

    if argv[1] == "-m":
        return importlib.import_module(argv[2]).main, argv[3:]
    return runpy.run_path(str(ROOT / argv[1]), run_name="step_script")["main"], argv[2:]


def test_every_step_script_accepts_the_options_the_plan_gives_it(tmp_path, monkeypatch):
    # The overhead step once passed `--device`, which overhead.py had lost: the GPU run's step
    # crashed at its first line. The scripts' own parsers read the plan's options, both forms.
    import argparse

    from benchmarks.gpucheck.plan import Context

    real_parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real_parse(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    checked = 0
    for rehearse in (False, True):
        ctx = Context(ROOT, sys.executable, tmp_path, rehearse)
        for step in STEPS:
            argv = step.command(ctx, step.budget_s)
            if argv[1:3] == ["-m", "pytest"]:
                continue
            main, options = _script_main(argv)
            try:
                main(options)
            except _Parsed:
                checked += 1
            except SystemExit as exc:
                raise AssertionError(f"{step.name}: {' '.join(argv[1:])} is refused by its script") from exc
    assert checked == 2 * sum(1 for s in STEPS if "pytest" not in s.command(Context(ROOT, "py", tmp_path, False), 1))
