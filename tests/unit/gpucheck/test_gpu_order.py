"""What the GPU check reaches first when its budget runs out before its lists do."""

import torch

from benchmarks import accuracy
from benchmarks.gpucheck.plan import ROOT
from benchmarks.gpucheck.tune_cuda import MIN_SHARE_S, share_of


def test_tune_gives_the_plans_first_examples_a_trial_before_sharing_evenly():
    # The H200's 65 s for five examples: an even 13 s each skipped all but one, and not the first.
    remaining, ran = 65.0, []
    for left in range(5, 0, -1):
        share = share_of(remaining, left)
        if share >= MIN_SHARE_S:
            ran.append(5 - left)
            remaining -= share
    assert ran == [0, 1]
    assert share_of(500.0, 5) == 100.0  # a long budget is still shared evenly


def test_accuracy_on_a_gpu_runs_cuda_examples_first_and_compiling_ones_last(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    order = accuracy.collect(None)
    names = [e.path.name for e in order]
    cuda_only = [i for i, e in enumerate(order) if "cuda" in e.requires]
    assert cuda_only and cuda_only == list(range(len(cuda_only)))
    planted = [e for e in order if e.set == "examples" and e.kind == "planted" and "cuda" not in e.requires]
    compiling = [e.path.name for e in planted if "torch.compile" in e.path.read_text()]
    plain = [e.path.name for e in planted if e.path.name not in compiling]
    assert compiling and max(names.index(n) for n in plain) < min(names.index(n) for n in compiling)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert [e.path.name for e in accuracy.collect(None)][:3] == sorted(
        p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))[:3]
