"""Reading files: encodings, size cap, notebooks, syntax errors."""

import json

from helpers.lint_files import write

from torchdoctor.lint.notebook import read_notebook
from torchdoctor.lint.source import Problem, read_source

LOOP = "import torch\nfor x in loader:\n    loss = model(x)\n    loss.backward()\n    opt.step()\n    v = loss.item()\n"


def test_a_pep263_cookie_is_honoured(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes("# -*- coding: latin-1 -*-\n# café\n".encode("latin-1") + LOOP.encode())
    source = read_source(path, "latin.py")
    assert not isinstance(source, Problem) and "café" in source.text and source.encoding == "iso-8859-1"
    assert [(f.code, f.line) for f in lint_paths_of(tmp_path, path).findings] == [("TD201", 8)]


def lint_paths_of(tmp_path, path):
    from torchdoctor.lint import LintOptions, lint_paths
    return lint_paths([path], LintOptions(isolated=True, jobs=1), cwd=tmp_path)


def test_invalid_utf8_without_cookie_is_a_problem_naming_the_fix(tmp_path):
    path = tmp_path / "bad.py"
    path.write_bytes(b"x = 1\ny = '\xff'\n")
    problem = read_source(path, "bad.py")
    assert isinstance(problem, Problem) and problem.line == 2 and "coding" in problem.message


def test_a_bom_is_stripped(tmp_path):
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + LOOP.encode())
    source = read_source(path, "bom.py")
    assert source.text.startswith("import torch")


def test_files_over_the_size_cap_are_skipped_with_a_note(tmp_path):
    path = write(tmp_path, LOOP + "# padding\n" * 200)
    problem = read_source(path, "train.py", max_bytes=100)
    assert isinstance(problem, Problem) and "limit" in problem.message and "max-file-bytes" in problem.message


def test_a_syntax_error_skips_that_file_only(tmp_path):
    write(tmp_path, "def broken(:\n    pass\n", "a_broken.py")
    write(tmp_path, LOOP, "b_ok.py")
    from torchdoctor.lint import LintOptions, lint_paths
    result = lint_paths([tmp_path], LintOptions(isolated=True, jobs=1), cwd=tmp_path)
    assert [(f.path, f.code) for f in result.findings] == [("b_ok.py", "TD201")]
    assert [(p.display, p.line) for p in result.problems] == [("a_broken.py", 1)]
    assert result.files_linted == 1 and "cannot parse" in result.problems[0].message


def test_null_bytes_are_a_problem_not_a_crash(tmp_path):
    path = tmp_path / "nul.py"
    path.write_bytes(b"x = 1\x00\n")
    result = lint_paths_of(tmp_path, path)
    assert result.files_linted == 0 and "cannot parse" in result.problems[0].message


def notebook(*cells) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": kind, "metadata": {}, "source": source} for kind, source in cells]}).encode()


def test_notebook_cells_join_and_map_back_to_cell_and_line():
    text, cells = read_notebook(notebook(("markdown", "# title"), ("code", "import torch\nx = 1"),
                                         ("code", ["%time y = 2\n", "!ls\n", "z = x?\n", "w = 3"])))
    assert text.splitlines() == ["import torch", "x = 1", "pass", "pass", "pass", "w = 3"]
    assert cells.locate(1) == (2, 1) and cells.locate(6) == (3, 4)


def test_cell_magics_blank_non_python_cells_and_keep_timed_python():
    text, _ = read_notebook(notebook(("code", "%%bash\nls -la\nx=("), ("code", "%%time\nfor i in range(3):\n    %time f()")))
    assert text.splitlines() == ["", "", "", "", "for i in range(3):", "    pass"]


def test_percent_continuation_lines_are_python_not_magics():
    text, _ = read_notebook(notebook(("code", 'msg = ("%d items"\n       % 3)')))
    assert "% 3)" in text


def test_a_broken_notebook_is_a_problem(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text("{not json")
    problem = read_source(path, "nb.ipynb")
    assert isinstance(problem, Problem) and "not a notebook" in problem.message
