"""--fix rewrites: the safe cases only, formatting and comments kept."""

from helpers.lint_files import write

from torchdoctor.cli import main
from torchdoctor.lint import LintOptions, lint_paths
from torchdoctor.lint.fix import plan_fixes

HEADER = """import torch
from torch.utils.data import DataLoader
device = "cuda"
"""


def fixed(tmp_path, body: str) -> str:
    path = write(tmp_path, HEADER + body)
    result = lint_paths([path], LintOptions(isolated=True, jobs=1), cwd=tmp_path)
    fixes, notes = plan_fixes(result.findings, result.files)
    assert not notes
    return fixes[0].after.decode()[len(HEADER):] if fixes else body


def test_non_blocking_is_added_to_copies_of_pinned_batches(tmp_path):
    body = """loader = DataLoader(ds, batch_size=8, pin_memory=True)
for x, y in loader:
    x, y = x.to(device), y.cuda()  # keep this comment
    model(x, y).backward()
    opt.step()
"""
    assert fixed(tmp_path, body) == body.replace("x.to(device), y.cuda()",
                                                 "x.to(device, non_blocking=True), y.cuda(non_blocking=True)")


def test_loader_keywords_keep_one_per_line_layout_and_trailing_commas(tmp_path):
    body = """loader = DataLoader(
    ds,
    batch_size=8,  # per GPU
    num_workers=4,
)
for epoch in range(10):
    for x in loader:
        model(x.to(device)).backward()
        opt.step()
"""
    assert fixed(tmp_path, body) == body.replace(
        "    num_workers=4,\n)", "    num_workers=4,\n    persistent_workers=True,\n    pin_memory=True,\n)")


def test_set_to_none_false_is_removed_keyword_or_positional(tmp_path):
    body = "opt.zero_grad(set_to_none=False)\nmodel.zero_grad(False)\nopt.zero_grad(\n    set_to_none=False,  # why\n)\n"
    # the removed argument's comment keeps a line of its own (it used to be dropped)
    assert fixed(tmp_path, body) == "opt.zero_grad()\nmodel.zero_grad()\nopt.zero_grad(\n    # why\n)\n"


def test_explicit_false_is_turned_true_not_duplicated(tmp_path):
    body = """loader = DataLoader(ds, num_workers=2, pin_memory=False, persistent_workers=False)
for epoch in range(3):
    for x in loader:
        model(x.to(device)).backward()
        opt.step()
"""
    assert fixed(tmp_path, body) == body.replace("pin_memory=False, persistent_workers=False",
                                                 "pin_memory=True, persistent_workers=True")


def test_persistent_workers_is_not_added_when_num_workers_might_be_zero(tmp_path):
    body = """loader = DataLoader(ds, num_workers=args.workers, pin_memory=True)
for epoch in range(3):
    for x in loader:
        model(x.to(device, non_blocking=True)).backward()
        opt.step()
"""
    assert fixed(tmp_path, body) == body


def test_fix_writes_the_file_keeps_its_encoding_and_a_second_run_is_clean(tmp_path, capsys):
    path = tmp_path / "latin.py"
    source = "# -*- coding: latin-1 -*-\n# café\nimport torch\nopt.zero_grad(set_to_none=False)\n"
    path.write_bytes(source.encode("latin-1"))
    assert main(["lint", "--isolated", "--fix", str(path)]) == 0
    assert path.read_bytes() == source.replace("set_to_none=False", "").encode("latin-1")
    assert "fixed 1 finding" in capsys.readouterr().err
    assert main(["lint", "--isolated", str(path)]) == 0


def test_diff_prints_the_change_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, "import torch\nopt.zero_grad(set_to_none=False)\n")
    before = path.read_text()
    assert main(["lint", "--isolated", "--diff", str(path)]) == 1
    out = capsys.readouterr().out
    assert "-opt.zero_grad(set_to_none=False)\n+opt.zero_grad()" in out and path.read_text() == before


def test_notebooks_are_reported_but_not_rewritten(tmp_path):
    import json
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [{"cell_type": "code", "metadata": {}, "source": "opt.zero_grad(set_to_none=False)\n"}]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    result = lint_paths([path], LintOptions(isolated=True, jobs=1), cwd=tmp_path)
    assert [f.code for f in result.findings] == ["TD303"] and not result.findings[0].fixable


def test_positional_non_blocking_is_read_as_non_blocking_and_never_doubled(tmp_path):
    body = """NB = False
loader = DataLoader(ds, num_workers=2, pin_memory=True, persistent_workers=True)
for x, y in loader:
    y = y.cuda(0, False)
    x = x.to(device, torch.float16, False)
    w = x.to(device, torch.float16)
    v = y.cuda(0, NB)
    u = y.cuda(0, True)
    t = x.to(device, dtype, False)
    model(x, y, w, v, u, t).backward()
    opt.step()
"""
    path = write(tmp_path, HEADER + body)
    result = lint_paths([path], LintOptions(isolated=True, jobs=1), cwd=tmp_path)
    fixable = {f.line - HEADER.count("\n"): f.fixable for f in result.findings if f.code == "TD104"}
    # `.to(device, dtype, False)`: `dtype` may be a tensor (`to(other, non_blocking, copy)`), so no finding
    assert fixable == {4: True, 5: True, 6: True, 7: False}
    assert fixed(tmp_path, body) == body.replace("y.cuda(0, False)", "y.cuda(0, True)").replace(
        "x.to(device, torch.float16, False)", "x.to(device, torch.float16, True)").replace(
        "x.to(device, torch.float16)", "x.to(device, torch.float16, non_blocking=True)")


def test_new_loader_keywords_keep_the_comment_on_the_argument_it_annotates(tmp_path):
    body = """loader = DataLoader(ds,
                    num_workers=4  # w
                    )
for epoch in range(3):
    for x in loader:
        model(x.to(device, non_blocking=True)).backward()
        opt.step()
"""
    assert fixed(tmp_path, body) == body.replace(
        "num_workers=4  # w\n", "num_workers=4,  # w\n                    persistent_workers=True,\n"
                                "                    pin_memory=True\n")


def test_one_fix_reaches_the_fixed_point_and_diff_shows_all_of_it(tmp_path, capsys):
    source = HEADER + """loader = DataLoader(ds, num_workers=2, persistent_workers=True)
for x, y in loader:
    x = x.to(device)
    model(x).backward()
    opt.step()
"""
    path = write(tmp_path, source)
    assert main(["lint", "--isolated", "--diff", str(path)]) == 1
    diff = capsys.readouterr().out
    # pin_memory=True makes the `.to(device)` a TD104 finding; one --diff shows that fix too
    assert "+loader = DataLoader(ds, num_workers=2, persistent_workers=True, pin_memory=True)" in diff
    assert "+    x = x.to(device, non_blocking=True)" in diff
    assert main(["lint", "--isolated", "--fix", str(path)]) == 0
    assert "fixed 2 finding(s)" in capsys.readouterr().err
    once = path.read_text()
    assert main(["lint", "--isolated", "--fix", str(path)]) == 0
    assert path.read_text() == once and "fixed" not in capsys.readouterr().err


def test_fix_and_diff_say_that_notebooks_are_not_rewritten(tmp_path, capsys):
    import json
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [{"cell_type": "code", "metadata": {}, "source": "opt.zero_grad(set_to_none=False)\n"}]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    for flag in ("--diff", "--fix"):
        main(["lint", "--isolated", flag, str(path)])
        err = capsys.readouterr().err
        assert "nb.ipynb: not rewritten" in err and "1 finding(s) there have a fix to apply by hand" in err
    assert json.loads(path.read_text()) == nb
