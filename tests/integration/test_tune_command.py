"""`torchdoctor tune` end to end: real trials in fresh processes on a small script."""

import json
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import torchdoctor
from torchdoctor.cli import main

SRC = str(Path(torchdoctor.__file__).resolve().parent.parent)

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(512, 32), torch.randn(512, 1)), batch_size=16)
assert loader.num_workers == 0, "this script refuses worker processes"
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(50):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
"""


# Two heads trained on alternate steps with SGD's weight decay: zero_grad(set_to_none=False) keeps
# decaying the idle head; set_to_none skips it. The "zero_grad=none" fix changes the training.
TWO_HEADS = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(2048, 32), torch.randn(2048, 1))
loader = DataLoader(data, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1))
body = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
heads = nn.ModuleList([nn.Linear(64, 1), nn.Linear(64, 1)])
params = list(body.parameters()) + list(heads.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.1)
step = 0
for epoch in range(20):
    for x, y in loader:
        loss = nn.functional.mse_loss(heads[step % 2](body(x)), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        step += 1
"""


def _tune(folder: Path, text: str, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`torchdoctor tune OPTIONS --format json` on the script `text`, in a process of its own."""
    script = folder / "train.py"
    script.write_text(text)
    out = folder / "tune"
    done = subprocess.run([sys.executable, "-m", "torchdoctor", "tune", *options, "--out", str(out), "--format",
                           "json", str(script)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": SRC})
    return done, out


# The two tunes of five runs each: (options, script). Their runs go one at a time inside each
# command, as always; the two commands run at once (the machine's two cores). What their tests
# check is which runs were made and kept, the tables' rows and the numerics guard's bit-for-bit
# verdicts: nothing compared with a time.
TUNES = {
    "test_tune_runs_chosen_trials_keeps_failures_and_builds_the_ladder": (
        ("--steps", "6", "--warmup", "1", "--trials", "zero_grad=none", "--trials", "workers=1",
         "--trials", "data=loader-only"), SCRIPT),
    "test_tune_flags_a_knob_that_changes_numerics_and_marks_the_others_identical": (
        ("--steps", "8", "--warmup", "2", "--trials", "zero_grad=none", "--trials", "foreach=true",
         "--trials", "workers=1"), TWO_HEADS),
}


@pytest.fixture(scope="module")
def tunes(request, tmp_path_factory) -> dict[str, Future]:
    """The selected tests' tunes, run together when the first of them asks; done before any test
    goes on (a tune's failure is raised in its own test, by its future)."""
    wanted = [item.originalname for item in request.session.items
              if item.module is request.module and item.originalname in TUNES]
    with ThreadPoolExecutor(max_workers=2) as pool:  # waits for both
        return {name: pool.submit(_tune, tmp_path_factory.mktemp("tune"), TUNES[name][1], *TUNES[name][0])
                for name in dict.fromkeys(wanted)}


def test_tune_runs_chosen_trials_keeps_failures_and_builds_the_ladder(tunes):
    done, out = tunes["test_tune_runs_chosen_trials_keeps_failures_and_builds_the_ladder"].result()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    tables = {t["title"]: t for t in report["tables"]}
    rows = tables["Before / after"]["rows"]
    assert [r[0] for r in rows] == ["baseline (both runs pooled)", "baseline (repeat)", "zero_grad=none"]
    assert rows[0][-1] == "baseline"
    failed = tables["Failed trials"]["rows"]
    assert failed[0][0] == "workers=1" and "refuses worker processes" in failed[0][2]
    stages = [r[0] for r in tables["Staged ladder"]["rows"]]
    assert stages[0] == "data loader alone" and "full run (baseline)" in stages
    assert "[baseline] running baseline" in done.stderr and "running data=loader-only" in done.stderr
    dirs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert dirs == ["01-baseline", "02-zero_grad=none", "03-workers=1", "04-data=loader-only", "05-baseline_repeat"]
    assert json.loads((out / "tune.json").read_text())["source"] == "tune"
    page = (out / "tune.html").read_text()  # the before/after bars, one per timed run, with their verdicts
    assert page.count('class="row-label"') >= 3 and "baseline (both runs pooled)" in page
    assert all((out / d / "report.html").exists() for d in ("01-baseline", "02-zero_grad=none"))


def test_bad_knob_in_trials_fails_before_anything_runs(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code = main(["tune", "--out", str(tmp_path / "t"), "--trials", "workers=many", str(script)])
    assert code == 2 and "bad value 'many' for knob workers" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_a_crashing_baseline_exits_1_with_its_log(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('no data here')\n")
    code = main(["tune", "--steps", "3", "--out", str(tmp_path / "t"), str(script)])
    assert code == 1 and "the baseline run failed" in capsys.readouterr().err


def test_tune_flags_a_knob_that_changes_numerics_and_marks_the_others_identical(tunes):
    done, _ = tunes["test_tune_flags_a_knob_that_changes_numerics_and_marks_the_others_identical"].result()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    guard = {r[0]: r for r in next(t for t in report["tables"] if t["title"] == "Numerics guard")["rows"]}
    assert guard["baseline (repeat)"][2] == "bit-identical"  # the script is reproducible: the floor is 0
    assert guard["foreach=true"][2] == "bit-identical" and guard["workers=1"][2] == "bit-identical"
    assert guard["zero_grad=none"][2] == "CHANGED" and "must not change numerics" in guard["zero_grad=none"][6]
    assert any(n.startswith("Numerics: zero_grad=none changed") for n in report["notes"])
    assert not any(n.startswith("Recommended: --set zero_grad=none") for n in report["notes"])
