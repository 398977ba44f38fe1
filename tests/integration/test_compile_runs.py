"""torch.compile under `torchdoctor run`, end to end in fresh processes (Dynamo's state is
per process): the script compiles exactly as it does alone, a recompiling call is found with its
guard and the recompile limit, a graph break at its line, and a clean compiled model gets no
finding. The clean scripts compile with the C++ Inductor backend (AOTAutograd traces them under the
doctor's modes; the models are tiny, yet a cold Inductor cache takes some 10 s a script). The
recompile, graph-break and hook-order scripts use Dynamo's eager backend: guards, the recompile
limit, breaks, Dynamo's counters and its warnings are Dynamo's, whatever backend it hands the
graphs to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import torchdoctor

pytestmark = pytest.mark.slow
SRC = str(Path(torchdoctor.__file__).resolve().parent.parent)

# Dynamo's own counters, written when the script ends (its loop stopped by the doctor or not)
COUNTERS = """
import atexit, json, os
from torch._dynamo.utils import counters as _counters
def _dump():
    with open(os.environ["COUNTERS_OUT"], "w") as f:
        json.dump({k: dict(_counters[k]) for k in ("frames", "stats", "graph_break")}, f)
atexit.register(_dump)
"""

CLEAN = COUNTERS + """
import torch
from torch import nn
torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)  # the CPU default, a for-loop, is TD306
for step in range(40):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""

# the first evaluation falls in the measured steps, where the doctor samples it: its batches
# (a DataLoader) bound that sample, and nothing of the doctor's may enter the compiled graphs
CLEAN_EVAL = CLEAN.replace("    opt.step()\n", """    opt.step()
    if step == 5:
        model.eval()
        with torch.no_grad():
            for (xb,) in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(24, 16)), batch_size=8):
                model(xb).argmax(-1).cpu()
        model.train()
""")

RECOMPILES = """
import torch
from torch import nn
torch._dynamo.config.recompile_limit = 3
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))
compiled = torch.compile(model, dynamic=False, backend="eager")  # guards and the limit are Dynamo's
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    x = torch.randn(4, 2 + step % 9, 8)
    out = compiled(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

BREAK = COUNTERS + """
import torch
from torch import nn

@torch.compile(backend="eager")  # the break and its counters are Dynamo's
def normalized_mse(pred, target):
    scale = target.abs().amax().item()
    return ((pred - target) / (scale + 1e-6)).pow(2).mean()

torch.manual_seed(0)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    loss = normalized_mse(model(torch.randn(8, 8)), torch.randn(8, 2))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _run(tmp_path: Path, text: str, *, doctor: bool = True, steps: int = 8) -> tuple[Path, dict]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": SRC, "COUNTERS_OUT": str(tmp_path / "counters.json")}
    out = tmp_path / ("run" if doctor else "alone")
    command = ([sys.executable, "-m", "torchdoctor", "run", "--steps", str(steps), "--warmup", "2", "--out", str(out),
                "--format", "json", str(script)] if doctor else [sys.executable, str(script)])
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    counters = tmp_path / "counters.json"
    return out, json.loads(counters.read_text()) if counters.exists() else {}


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line)


def _findings(out: Path) -> list[dict]:
    return json.loads((out / "report.json").read_text())["findings"]


def test_a_compiled_script_compiles_as_it_does_alone_and_gets_no_finding(tmp_path, runs):
    runs.finish()  # the runs of the other tests: none beside this one
    out, under = _run(tmp_path, CLEAN + "\n")
    alone = runs.alone("clean")  # Dynamo's counters of CLEAN run alone
    # the doctor's probes change nothing Dynamo does: one frame, one graph, no break
    assert under["frames"] == alone["frames"] and under["stats"]["unique_graphs"] == alone["stats"]["unique_graphs"] == 1
    assert not under.get("graph_break")
    findings = _findings(out)
    assert [f for f in findings if f["severity"] in ("high", "medium")] == []
    assert not [f for f in findings if f["code"] in ("TD404", "TD405", "TD406")]
    record = json.loads((out / "record.json").read_text())
    info = record["compile"]
    assert info["compiled_at"][0]["line"] == _line(CLEAN, "torch.compile(") and info["probe_modes"] == "suspended"
    assert info["events"][0]["called_from"]["line"] == _line(CLEAN, "model(x)")
    assert info["events"][0]["module"] == "Sequential"
    assert set(info["graph_calls"].values()) == {1}  # one compiled graph per step
    assert record["dispatch"]["sampled_steps"] > 0  # the op windows still ran, around the compiled code


def test_recompiles_then_the_limit_are_found_at_the_calling_line(tmp_path):
    out, counters = _run(tmp_path, RECOMPILES)
    (finding,) = [f for f in _findings(out) if f["code"] == "TD405"]
    assert finding["severity"] == "high" and finding["location"]["line"] == _line(RECOMPILES, "compiled(x)")
    assert "recompile limit (3)" in finding["message"] and "dimension 1 of the first argument changed" in finding["message"]
    assert "mark_dynamic" in finding["fix"]
    report = (out / "report.md").read_text()
    assert "of which compiling (torch.compile)" in report


def test_a_graph_break_on_item_is_found_at_its_line(tmp_path):
    out, counters = _run(tmp_path, BREAK)
    (finding,) = [f for f in _findings(out) if f["code"] == "TD406"]
    assert finding["location"]["line"] == _line(BREAK, ".item()") and finding["severity"] == "medium"
    assert finding["evidence"]["host_sync"] is True and finding["evidence"]["graphs_per_step"] == 2
    assert "Tensor.item()" in finding["title"]
    assert len(counters["graph_break"]) == 1  # Dynamo's own count: the script's break, none of the doctor's


def test_an_evaluation_of_compiled_code_sampled_by_the_doctor_compiles_as_it_does_alone(tmp_path, runs):
    """The doctor's first-evaluation sample ends at a module call through a global module hook;
    Dynamo would trace that hook into the compiled graphs (a graph break on the doctor's clock,
    frames compiled again, other numerics). With compiled code in use the hook is not installed."""
    assert "if step == 5:" in CLEAN_EVAL
    runs.finish()  # the runs of the other tests: none beside this one
    out, under = _run(tmp_path, CLEAN_EVAL)
    alone = runs.alone("clean-eval")  # Dynamo's counters of CLEAN_EVAL run alone
    assert not under.get("graph_break"), under.get("graph_break")
    assert under["frames"] == alone["frames"] and under["stats"]["unique_graphs"] == alone["stats"]["unique_graphs"]
    # compiling in the first steps, under memory accounting, is the script's cost, not the probe's
    record = json.loads((out / "record.json").read_text())
    memory = next(p for p in record["doctor_cost"]["probes"] if p["probe"] == "memory")
    assert "compiling in its steps is the script's" in memory["note"]
    # the evaluation's graphs (3 batches) are its own, not the training step's: one graph per step
    info = record["compile"]
    assert set(info["graph_calls"].values()) == {1} and sum(info["eval_graph_calls"].values()) == 3


# The same training compiled at different moments against the doctor's global module hooks (the
# memory accounting's, opened at the optimizer's creation; the first evaluation sample's): before
# the optimizer, after it (inside the memory window), at a later step; and a script with a global
# hook of its own, which Dynamo must still warn about. Dynamo's eager backend: the warning, the
# wrapper and the knob's check are Dynamo's, and Inductor's C++ build would double each run's time.
ORDERS = """
import os, sys, torch
from torch import nn
order = os.environ["ORDER"]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
if order == "own-hook":
    torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
if order in ("before", "own-hook"):
    model = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
if order == "after":
    model = torch.compile(model, backend="eager")
forward = torch.compile(lambda x: model(x), backend="eager") if order == "function" else None
for step in range(12):
    if order == "later" and step == 3:
        model = torch.compile(model, backend="eager")
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = nn.functional.cross_entropy((forward or model)(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 4:
        model.eval()
        with torch.no_grad():
            (forward or model)(torch.randn(8, 16))
        model.train()
print("done", file=sys.stderr)
"""


def _stderr(folder: Path, order: str, out: Path | None, *options: str) -> str:
    """The script's stderr (less the doctor's own lines), run under the doctor into `out`, or
    alone where `out` is None."""
    script = folder / "train.py"
    env = {**os.environ, "PYTHONPATH": SRC, "ORDER": order}
    command = ([sys.executable, "-m", "torchdoctor", "run", "--steps", "20", "--warmup", "1", *options, "--out",
                str(out), str(script)] if out is not None else [sys.executable, str(script)])
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return "\n".join(line for line in done.stderr.splitlines() if not line.startswith("torchdoctor:"))


HOOKS_TEST = "test_the_doctors_global_hooks_never_make_dynamo_warn_the_script"
KNOB_TEST = "test_the_compile_knob_says_when_the_script_compiles_itself"
CLEAN_TESTS = {"test_a_compiled_script_compiles_as_it_does_alone_and_gets_no_finding": "clean",
               "test_an_evaluation_of_compiled_code_sampled_by_the_doctor_compiles_as_it_does_alone": "clean-eval"}
KNOB = ("--set", "compile=true")


class _Runs:
    """The runs whose results are text and counters, never times, made before the tests read
    them, two at a time (the machine's two cores), all that the selected tests need when the first
    asks (`finish`):
    - each script alone, without the doctor, once (a hook test and a knob test share an order's):
      an order's stderr, the clean scripts' Dynamo counters;
    - the hook and knob tests' runs under the doctor: stderr and the run directory.
    The clean scripts' runs under the doctor are the tests' own, after these, one at a time with
    nothing beside them (their findings must stand on the steps' times). An order's script lives
    in one folder for its runs alone and under the doctor: its path is in Dynamo's warning."""

    def __init__(self, base: Path, keys: list[tuple]):
        self.base, self.keys, self._runs = base, keys, None

    def folder(self, order: str) -> Path:
        return self.base / order

    def _one(self, key: tuple):
        kind, name = key[0], key[-1]
        if kind == "alone" and name in ("clean", "clean-eval"):
            folder = self.base / name
            folder.mkdir()
            return _run(folder, CLEAN if name == "clean" else CLEAN_EVAL, doctor=False)[1]
        if kind == "alone":
            return _stderr(self.folder(name), name, None)
        out = self.base / f"run-{kind}-{name}"
        return _stderr(self.folder(name), name, out, *(KNOB if kind == "knob" else ())), out

    def finish(self) -> None:
        if self._runs is None:
            for key in self.keys:  # the orders' folders first, in this thread
                if key[-1] not in ("clean", "clean-eval") and not self.folder(key[-1]).exists():
                    self.folder(key[-1]).mkdir()
                    (self.folder(key[-1]) / "train.py").write_text(ORDERS)
            with ThreadPoolExecutor(max_workers=2) as pool:  # waits for every run
                self._runs = {key: pool.submit(self._one, key) for key in self.keys}

    def result(self, *key: str):
        """A run's result; its failure (an assertion of `_stderr` or `_run`) is raised in the
        tests that read it, alone."""
        self.finish()
        return self._runs[key].result()

    def alone(self, name: str):
        """An order's stderr, or a clean script's Dynamo counters, run alone."""
        return self.result("alone", name)

    def under(self, test: str, order: str) -> tuple[str, Path]:
        """An order's stderr under the doctor, as the hook test ("hooks") or the knob test
        ("knob", with --set compile=true) runs it, and its run directory."""
        return self.result(test, order)


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> _Runs:
    keys = []
    for item in request.session.items:
        if item.module is not request.module:
            continue
        if item.originalname in (HOOKS_TEST, KNOB_TEST):
            order = item.callspec.params["order"]
            wanted = [("alone", order), ("hooks" if item.originalname == HOOKS_TEST else "knob", order)]
        else:
            wanted = [("alone", CLEAN_TESTS[item.originalname])] if item.originalname in CLEAN_TESTS else []
        keys += [key for key in wanted if key not in keys]
    return _Runs(tmp_path_factory.mktemp("runs"), keys)


@pytest.mark.parametrize("order", ["before", "after", "later", "own-hook"])
def test_the_doctors_global_hooks_never_make_dynamo_warn_the_script(runs, order):
    """`OptimizedModule.__call__` warns into stderr when any global module hook is registered:
    the doctor's own must not count, whenever the script compiles; the script's own still do."""
    (under, _), alone = runs.under("hooks", order), runs.alone(order)
    assert under == alone
    assert ("global hooks" in alone) == (order == "own-hook")


@pytest.mark.parametrize("order, detail", [
    ("before", "Sequential runs under the script's own torch.compile"),  # the knob finds the wrapper
    ("later", "it compiles Sequential itself"),  # the knob compiled first: taken back at the script's compile
    ("function", "called only inside compiled code"),  # the model never runs outside the script's compiled code
])
def test_the_compile_knob_says_when_the_script_compiles_itself(runs, order, detail):
    (under, out), alone = runs.under("knob", order), runs.alone(order)  # `run --set compile=true`
    assert under == alone
    (knob,) = json.loads((out / "record.json").read_text())["knobs"]
    assert not knob["applied"] and "already compiled by the script" in knob["detail"] and detail in knob["detail"]
