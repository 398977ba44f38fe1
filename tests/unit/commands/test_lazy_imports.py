"""Commands import only what they use: `tune`'s parent process never trains, `lint` without
--fix needs no libcst, `rules` needs neither the linter nor the trace parser. Checked in a
fresh interpreter, since this test process has imported everything already."""

import json
import subprocess
import sys

import pytest

CHECK = """
import contextlib, io, json, sys
from torchdoctor.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    main(json.loads(sys.argv[1]))
print(json.dumps(sorted(sys.modules)))
"""


def modules_after(argv: list[str]) -> set[str]:
    out = subprocess.run([sys.executable, "-c", CHECK, json.dumps(argv)], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def _top(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("argv", [["tune", "--help"], ["run", "--help"], ["memory", "--help"], ["comm", "--help"], ["--help"]])
def test_help_never_imports_torch(argv):
    assert "torch" not in _top(modules_after(argv))


def test_lint_without_fix_imports_neither_torch_nor_libcst(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nfor x in loader:\n    loss = model(x)\n    print(loss.item())\n")
    loaded = modules_after(["lint", str(script)])
    assert {"torch", "libcst"}.isdisjoint(_top(loaded))
    assert "torchdoctor.lint.engine" in loaded  # it did lint


def test_rules_imports_no_linter_no_trace_parser_no_torch():
    loaded = modules_after(["rules"])
    # msgspec is the data model's own reader (model/serialize.py): its import is light, torch's and rich's are not
    assert {"torch", "libcst", "rich"}.isdisjoint(_top(loaded))
    assert not {m for m in loaded if m.startswith(("torchdoctor.lint", "torchdoctor.trace."))}
    assert "torchdoctor.trace" not in loaded
    assert "torchdoctor.rules.registry" in loaded


def test_lint_fix_does_load_libcst(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("for x in loader:\n    x = x.to('cuda')\n")
    assert "libcst" in _top(modules_after(["lint", "--diff", str(script)]))


def test_the_tune_parent_process_never_imports_torch(tmp_path):
    """A bad target fails after the tune command has loaded everything its parent uses."""
    loaded = modules_after(["tune", "--out", str(tmp_path / "t"), str(tmp_path / "missing.py")])
    assert "torchdoctor.tune.tuner" in loaded and "torchdoctor.tune.report" in loaded
    assert "torch" not in _top(loaded)


def test_the_memory_parent_process_never_imports_torch(tmp_path):
    """Trials run in their own processes; a bad size fails after the command loaded what it uses."""
    loaded = modules_after(["memory", "--device-memory", "24Gb", str(tmp_path / "train.py")])
    assert "torchdoctor.commands.memory" in loaded and "torch" not in _top(loaded)
    check = "import sys, torchdoctor.memory.summary, torchdoctor.diagnosis.run; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the search, the trials' parent side and the diagnosis

