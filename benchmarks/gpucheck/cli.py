"""`python3 dev.py gpu ...`: the options, and which of the five forms runs."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from benchmarks.gpucheck import bundle, dryrun, wheels
from benchmarks.gpucheck.orchestrate import Orchestrator, new_work_dir
from benchmarks.gpucheck.plan import ROOT, STEPS, TOTAL_BUDGET_S, Context, budgets, select_steps

DEFAULT_OUT = ROOT / ".gpu-out"

USAGE = """python3 dev.py gpu --prepare               wheels for the GPU machine, and the command to run there
       python3 dev.py gpu --dry-run               the plan, checked on this machine (CI runs it)
       python3 dev.py gpu [--out DIR]             the check itself, on the GPU machine (at most 8 files in DIR)
       python3 dev.py gpu --rehearse [--out DIR]  the same steps, small, on a CPU machine (no GPU evidence)
       python3 dev.py gpu --unpack DIR            a run's files into benchmarks/results/gpu/ and tests/fixtures/real/
       python3 dev.py gpu --steps fixtures,memory [--examples a.py,b.py] [--budget STEP=S]
                                                  a rerun of some steps (install and machine always run)"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 dev.py gpu", usage=USAGE)
    form = p.add_mutually_exclusive_group()
    form.add_argument("--prepare", action="store_true")
    form.add_argument("--dry-run", action="store_true")
    form.add_argument("--rehearse", action="store_true")
    form.add_argument("--unpack", type=Path, metavar="DIR")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where the run's files go (default {DEFAULT_OUT.name}/)")
    p.add_argument("--root", type=Path, default=ROOT, help="--unpack into this folder instead of the project")
    p.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS", help="change one step's budget")
    p.add_argument("--total", type=float, default=TOTAL_BUDGET_S, help="seconds for the whole check")
    p.add_argument("--python", default=sys.executable, help="the interpreter to check (default: this one)")
    p.add_argument("--steps", help="comma-separated steps of a rerun; its bundle's tag carries the time of day")
    p.add_argument("--examples", help="comma-separated examples for the accuracy step (default: every one)")
    return p


def _budgets(texts: list[str]) -> dict[str, float]:
    overrides = {}
    for text in texts:
        name, _, seconds = text.partition("=")
        try:
            overrides[name] = float(seconds)
        except ValueError:
            raise ValueError(f"--budget {text}: expected STEP=SECONDS, e.g. --budget accuracy=150") from None
    return budgets(overrides)


def _has_torch(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def main(argv: list[str], venv_python: Callable[[], str]) -> int:
    """`venv_python()` makes the project's .venv (as `dev.py test` does) and returns its python."""
    opts = parser().parse_args(argv)
    try:
        step_budgets = _budgets(opts.budget)
        steps = select_steps(opts.steps)
    except ValueError as exc:
        print(f"dev.py gpu: {exc}", file=sys.stderr)
        return 2
    if opts.prepare:
        return wheels.prepare(venv_python)
    if opts.unpack is not None:
        try:
            written = bundle.unpack(opts.unpack, opts.root)
        except bundle.BundleError as exc:
            print(f"dev.py gpu --unpack: {exc}", file=sys.stderr)
            return 2
        for path in written:
            print(path)
        print(f"{len(written)} files unpacked; review them, then commit benchmarks/results/gpu/ and tests/fixtures/real/")
        return 0
    python = opts.python
    if (opts.dry_run or opts.rehearse) and not _has_torch(python):
        python = venv_python()  # a CPU machine's plain python3: check with the project's .venv instead
        print(f"dev.py gpu: {opts.python} has no torch; using {python}", flush=True)
    if opts.dry_run:
        return dryrun.dry_run(python, step_budgets)
    work = new_work_dir()
    ctx = Context(ROOT, python, work, opts.rehearse, accuracy_only=opts.examples)
    orchestrator = Orchestrator(ctx, opts.out, step_budgets, opts.total, steps=steps, partial=steps != STEPS)
    try:
        code = orchestrator.run()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for s in orchestrator.state.steps:
        print(f"  {s.name:14} {s.status:8} {s.seconds:6.1f} s  {s.reason}")
    print(f"SUMMARY.md and the rest: {opts.out}" + ("" if code != 2 else
          " (no CUDA device here: use --dry-run or --rehearse on a machine without one)"))
    return code
