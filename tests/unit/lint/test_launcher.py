"""A launcher script whose training loop lives in another module of its project (`main.py` calls
`train_one_epoch` from `pkg/train.py` once per epoch) is linted with that module: the per-step
habits are in the module, and `lint main.py` is how such a project is linted."""

import textwrap

from torchdoctor.lint import LintOptions, lint_paths

MAIN = """
import torch
from pkg.train import train_one_epoch
from pkg.data import make_loader
from pkg.params import parse_args

def main():
    args = parse_args()
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.AdamW(model.parameters())
    loader = make_loader(args)
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, opt, args)

main()
"""

TRAIN = """
import itertools
import torch
import torch.distributed as dist

def train_one_epoch(model, loader, opt, args):
    it = iter(loader)
    for i in itertools.count():
        try:
            x, y = next(it)
            more = torch.tensor(1)
        except StopIteration:
            more = torch.tensor(0)
        dist.all_reduce(more)
        if more < args.world_size:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        shown = loss.item()
"""

DATA = """
import torch

def make_loader(args):
    rows = []
    for i in range(args.n):
        rows.append(torch.randn(8).sum().item())
    return torch.utils.data.DataLoader(rows, batch_size=4)
"""


def _project(tmp_path, main=MAIN, train=TRAIN):
    (tmp_path / "pkg").mkdir()
    for name, text in (("__init__", ""), ("train", train), ("data", DATA), ("params", "def parse_args():\n    pass\n")):
        (tmp_path / "pkg" / f"{name}.py").write_text(textwrap.dedent(text))
    (tmp_path / "main.py").write_text(textwrap.dedent(main))
    return tmp_path / "main.py"


def _lint(tmp_path, *paths):
    return lint_paths(list(paths), LintOptions(isolated=True, min_severity="info", jobs=1), cwd=tmp_path)


def test_the_training_loop_a_launcher_calls_into_is_linted_with_it(tmp_path):
    result = _lint(tmp_path, _project(tmp_path))
    got = {(f.path, f.line, f.code) for f in result.findings}
    assert ("pkg/train.py", 15, "TD201") in got  # the end-of-data test on a tensor, every step
    assert ("pkg/train.py", 21, "TD201") in got  # loss.item() every step
    assert result.files_linted == 2
    assert [n for n in result.notes if "pkg/train.py" in n]
    # the module is reported, never rewritten: --fix changes the files named on the command line
    assert not any(f.fixes for f in result.findings if f.path == "pkg/train.py")


def test_a_module_without_a_training_step_is_not_reported(tmp_path):
    # make_loader reads a value per item in a loop, but it holds no training step: not followed into the report
    result = _lint(tmp_path, _project(tmp_path))
    assert not [f for f in result.findings if f.path.startswith("pkg/data")]
    assert not [n for n in result.notes if "pkg/data.py" in n or "pkg/params.py" in n]


def test_a_script_that_trains_itself_follows_nothing(tmp_path):
    trains = MAIN.replace("        train_one_epoch(model, loader, opt, args)",
                          "        for x, y in loader:\n            model(x).sum().backward()\n            opt.step()\n"
                          "        train_one_epoch(model, loader, opt, args)")
    result = _lint(tmp_path, _project(tmp_path, main=trains))
    assert not [f for f in result.findings if f.path.startswith("pkg/")]


def test_a_module_named_too_is_linted_once(tmp_path):
    main = _project(tmp_path)
    result = _lint(tmp_path, main, tmp_path / "pkg" / "train.py")
    lines = [f.line for f in result.findings if f.path == "pkg/train.py" and f.code == "TD201"]
    assert sorted(lines) == sorted(set(lines)) and 21 in lines
    assert not result.notes
