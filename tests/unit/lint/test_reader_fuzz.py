"""Bad input never shows a traceback of ours: random bytes, truncated UTF-8, NUL bytes, huge
lines, nesting deeper than the parser allows, f-strings too slow to parse, symbolic link loops.
Each gives findings or a one-line problem; the exit status is 2 only when nothing could be
linted."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from torchdoctor.lint import LintOptions, lint_paths

ROOT = Path(__file__).resolve().parents[3]
VALID = b"import torch\nfor x in loader:\n    model(x).backward()\n    opt.step()\n    print(x.item())\n"


def fuzz_inputs() -> dict[str, bytes]:
    rng = random.Random(13)
    inputs = {f"random_{i}.py": bytes(rng.randrange(256) for _ in range(rng.choice((1, 17, 400, 5000))))
              for i in range(12)}
    for i in range(12):  # valid code with random bytes spliced in
        cut = rng.randrange(len(VALID))
        inputs[f"spliced_{i}.py"] = VALID[:cut] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))) + VALID[cut:]
    inputs.update({
        "truncated_utf8.py": "label = 'naïve café'\n".encode()[:-3],
        "nul_bytes.py": VALID.replace(b"\n", b"\x00\n", 1),
        "huge_line.py": b"x = [" + b"1, " * 400_000 + b"]\n" + VALID,
        "huge_string.py": b"x = '" + b"a" * 2_000_000 + b"'\n" + VALID,
        "deep_parens.py": b"x = " + b"(" * 300 + b"1" + b")" * 300 + b"\n",
        "deep_elif.py": b"if a == 0:\n    pass\n" + b"".join(b"elif a == %d:\n    pass\n" % i for i in range(1, 3000)),
        "deep_ifexp.py": b"x = " + b"a if b == 1 else " * 900 + b"c\n",
        "slow_fstring.py": b'x = f"' + b"{a}" * 120_000 + b'"\n',
        "bad_cookie.py": b"# -*- coding: klingon -*-\n" + VALID,
        "bom_and_cookie.py": b"\xef\xbb\xbf# -*- coding: latin-1 -*-\n" + VALID,
        "latin1_no_cookie.py": b"x = '\xe9'\n" + VALID,
        "crlf_and_formfeed.py": VALID.replace(b"\n", b"\r\n") + b"\x0c\r\n",
        "only_comment.py": b"# nothing here",
        "empty.py": b"",
        "notebook.ipynb": b'{"cells": [{"cell_type": "code", "source": ["x = (\\u0000"]}], "nbformat": 4}',
        "not_json.ipynb": b"\xff\xfe{",
    })
    return inputs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz")
    for name, data in fuzz_inputs().items():
        (folder / name).write_bytes(data)
    os.symlink(folder / "loop_a.py", folder / "loop_b.py")
    os.symlink(folder / "loop_b.py", folder / "loop_a.py")
    return folder


@pytest.mark.parametrize("name", sorted(fuzz_inputs()))
def test_each_bad_input_gives_findings_or_a_one_line_problem(corpus, name):
    result = lint_paths([corpus / name], LintOptions(isolated=True, jobs=1, min_severity="info"), cwd=corpus)
    assert result.files_found == 1
    for problem in result.problems:
        assert "\n" not in str(problem) and "internal error" not in problem.message


def test_known_bad_inputs_say_what_is_wrong(corpus):
    messages = {p.display: p.message for p in lint_paths(
        [corpus], LintOptions(isolated=True, jobs=1), cwd=corpus).problems}
    assert messages["nul_bytes.py"].startswith("cannot parse")
    assert messages["truncated_utf8.py"].startswith("not valid utf-8")
    assert "f-string of 360,000 characters with 120,000 placeholders" in messages["slow_fstring.py"]
    assert "nested too deeply" in messages["deep_parens.py"] or "cannot parse" in messages["deep_parens.py"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "torchdoctor", "lint", "--isolated", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_command_on_the_whole_corpus_exits_with_findings_and_no_traceback(corpus):
    done = cli(".", cwd=corpus)
    assert "Traceback" not in done.stderr
    assert done.returncode == 1  # the readable files have findings
    assert "loop_a.py: skipped, a symbolic link loop" in done.stderr


def test_the_command_on_only_unreadable_input_exits_2_with_one_line_each(corpus):
    done = cli("random_0.py", "loop_a.py", cwd=corpus)
    assert "Traceback" not in done.stderr and done.returncode == 2
    assert [line.split(":")[0] for line in done.stderr.splitlines()] == ["loop_a.py", "random_0.py", "torchdoctor"]
