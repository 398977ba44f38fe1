"""CUDA allocator statistics against a fake torch.cuda, and the real CPU-only torch."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from torchdoctor.run.probes.cuda_memory import read_cuda_memory, reset_peak
from torchdoctor.model.record import CudaMemory

GIB = 1024**3

STATS = {
    "allocated_bytes.all.peak": 30 * GIB,
    "allocated_bytes.all.current": 2 * GIB,
    "reserved_bytes.all.peak": 34 * GIB,
    "num_alloc_retries": 3,
    "num_ooms": 1,
    "inactive_split_bytes.all.current": 512 * 1024**2,
}


class FakeCuda:
    def __init__(self, available=True, initialized=True, stats=None, stats_error=None):
        self.available, self.initialized = available, initialized
        self.stats = dict(STATS) if stats is None else stats
        self.stats_error = stats_error
        self.resets: list[int] = []
        self.stats_devices: list[int] = []

    def is_available(self):
        return self.available

    def is_initialized(self):
        return self.initialized

    def memory_stats(self, device):
        if self.stats_error:
            raise self.stats_error
        self.stats_devices.append(device)
        return self.stats

    def get_device_properties(self, device):
        return SimpleNamespace(total_memory=80 * GIB)

    def reset_peak_memory_stats(self, device):
        self.resets.append(device)


def fake_torch(**kwargs):
    return SimpleNamespace(cuda=FakeCuda(**kwargs))


def test_reads_allocator_statistics():
    torch_module = fake_torch()
    assert read_cuda_memory(1, torch_module=torch_module) == CudaMemory(
        device_total_bytes=80 * GIB, peak_allocated_bytes=30 * GIB, peak_reserved_bytes=34 * GIB,
        alloc_retries=3, ooms=1, inactive_split_bytes=512 * 1024**2,
    )
    assert torch_module.cuda.stats_devices == [1]


def test_optional_counters_default_to_zero():
    stats = {"allocated_bytes.all.peak": 5, "reserved_bytes.all.peak": 8}
    memory = read_cuda_memory(0, torch_module=fake_torch(stats=stats))
    assert (memory.alloc_retries, memory.ooms, memory.inactive_split_bytes) == (0, 0, 0)


def test_no_statistics_without_cuda():
    assert read_cuda_memory(0, torch_module=fake_torch(available=False)) is None
    # CUDA present but never used: reading stats must not create a context.
    uninitialized = fake_torch(initialized=False)
    assert read_cuda_memory(0, torch_module=uninitialized) is None
    assert uninitialized.cuda.stats_devices == []


def test_missing_peaks_give_none_rather_than_zeros():
    assert read_cuda_memory(0, torch_module=fake_torch(stats={})) is None


def test_errors_give_none():
    assert read_cuda_memory(0, torch_module=fake_torch(stats_error=RuntimeError("driver gone"))) is None


def test_reset_peak():
    torch_module = fake_torch()
    assert reset_peak(2, torch_module=torch_module) is True
    assert torch_module.cuda.resets == [2]
    without = fake_torch(initialized=False)
    assert reset_peak(0, torch_module=without) is False
    assert without.cuda.resets == []


def test_real_torch_without_cuda():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return  # covered by the fakes; on a GPU machine the real values vary
    assert read_cuda_memory(0) is None
    assert reset_peak(0) is False
