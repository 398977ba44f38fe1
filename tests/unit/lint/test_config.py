"""[tool.torchdoctor.lint] in pyproject.toml."""

import pytest
from helpers.lint_files import write

from torchdoctor.errors import InputError
from torchdoctor.lint import LintOptions, lint_paths
from torchdoctor.lint.config import find_config, load_config

SCRIPT = "for x in loader:\n    model(x).backward()\n    opt.step()\n    v = x.item()\n    torch.cuda.synchronize()\n"


def run(tmp_path, target, **options):
    options.setdefault("jobs", 1)
    return [(f.path, f.code) for f in lint_paths([target], LintOptions(**options), cwd=tmp_path).findings]


def test_the_nearest_pyproject_with_our_table_is_used(tmp_path):
    write(tmp_path, '[tool.torchdoctor.lint]\nignore = ["TD204"]\n', "pyproject.toml")
    write(tmp_path, '[project]\nname = "sub"\n', "sub/pyproject.toml")  # no table: keep looking up
    path = write(tmp_path, "import torch\n" + SCRIPT, "sub/pkg/train.py")
    assert find_config(path) == tmp_path / "pyproject.toml"
    assert run(tmp_path, path) == [("sub/pkg/train.py", "TD201")]


def test_command_line_lists_replace_the_file_and_isolated_ignores_it(tmp_path):
    write(tmp_path, '[tool.torchdoctor.lint]\nselect = ["TD204"]\n', "pyproject.toml")
    path = write(tmp_path, "import torch\n" + SCRIPT)
    assert run(tmp_path, path) == [("train.py", "TD204")]
    assert run(tmp_path, path, select=["TD201"]) == [("train.py", "TD201")]
    assert sorted(run(tmp_path, path, isolated=True)) == [("train.py", "TD201"), ("train.py", "TD204")]


def test_per_file_ignores_exclude_and_min_severity(tmp_path):
    write(tmp_path, """
[tool.torchdoctor.lint]
exclude = ["legacy"]
per-file-ignores = { "tests/*" = ["TD201"] }
min-severity = "medium"
""", "pyproject.toml")
    write(tmp_path, "import torch\n" + SCRIPT, "tests/test_loop.py")
    write(tmp_path, "import torch\n" + SCRIPT, "legacy/old.py")
    write(tmp_path, "import torch\nfor i in range(3):\n    torch.cuda.empty_cache()\n", "low.py")
    assert run(tmp_path, tmp_path) == [("tests/test_loop.py", "TD204")]


@pytest.mark.parametrize("body, message", [
    ('[tool.torchdoctor.lint]\nselct = ["TD2"]\n', "unknown key"),
    ('[tool.torchdoctor.lint]\nselect = ["TD0"]\n', "TD0"),
    ('[tool.torchdoctor.lint]\nmin-severity = "loud"\n', "min-severity"),
    ('[tool.torchdoctor.lint]\nmax-file-bytes = -1\n', "max-file-bytes"),
    ("[tool.torchdoctor.lint\n", "not valid TOML"),
])
def test_a_bad_config_is_an_input_error_naming_the_file(tmp_path, body, message):
    path = write(tmp_path, body, "pyproject.toml")
    with pytest.raises(Exception, match=message) as info:
        load_config(path)
    assert isinstance(info.value, InputError) or "TD0" in str(info.value)
