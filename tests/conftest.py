"""Test-wide fixtures: the leak guard, the gpu marker, the golden-file and screenshot flags."""

from __future__ import annotations

import builtins
import logging
import signal
import threading

import pytest
import torch
import torch.optim.optimizer as optim_module
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from torchdoctor.run.probes.patching import is_patched

PATCHABLE = [
    (DataLoader, "__init__"), (DataLoader, "__iter__"), (_BaseDataLoaderIter, "__next__"),
    (torch.nn.Module, "train"), (torch.nn.Module, "zero_grad"),
    (torch.optim.Optimizer, "__init__"), (torch.optim.Optimizer, "zero_grad"),
    (torch, "save"), (builtins, "print"), (logging.Logger, "handle"),
    (torch.autograd, "backward"), (torch.Tensor, "backward"), (torch.cuda, "synchronize"),
]


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden expected files")
    parser.addoption("--update-screenshots", action="store_true",
                     help="save the browser test's screenshots and page facts into benchmarks/results/")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _doctor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("torchdoctor")]


@pytest.fixture(autouse=True)
def no_probe_outlives_the_test():
    """Every hook, patch, mode, profiler and sampler thread a test starts must be gone."""
    hooks_before = (len(optim_module._global_optimizer_pre_hooks),
                    len(optim_module._global_optimizer_post_hooks))
    yield
    leaks = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in PATCHABLE
             if is_patched(getattr(owner, name))]
    hooks_after = (len(optim_module._global_optimizer_pre_hooks),
                   len(optim_module._global_optimizer_post_hooks))
    if hooks_after != hooks_before:
        leaks.append(f"optimizer step hooks {hooks_before} -> {hooks_after}")
    if torch._C._len_torch_function_stack():
        leaks.append("a TorchFunctionMode is still active")
    if torch._C._len_torch_dispatch_stack():
        leaks.append("a TorchDispatchMode is still active")
    if torch.autograd.profiler._is_profiler_enabled:
        leaks.append("the profiler is still running")
    if _doctor_threads():
        leaks.append(f"threads alive: {_doctor_threads()}")
    if signal.getitimer(signal.ITIMER_REAL)[0] or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
        leaks.append("the line sampler's SIGALRM timer or handler is still set")
    handler = signal.getsignal(signal.SIGTERM)
    if handler not in (signal.SIG_DFL, None):
        if getattr(getattr(handler, "__self__", None), "stale", False):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # put back by a framework's teardown: acts as the default
        else:
            leaks.append(f"a SIGTERM handler is still set: {handler}")
    assert not leaks, "probe state outlived the test: " + "; ".join(leaks)


@pytest.fixture
def update_goldens(request) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def update_screenshots(request) -> bool:
    return bool(request.config.getoption("--update-screenshots"))
