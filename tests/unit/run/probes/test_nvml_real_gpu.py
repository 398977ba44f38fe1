"""Twins of the NVML and CUDA-memory probe tests (which use a fake pynvml and fake allocator
statistics) on samples recorded on a real device by `python3 dev.py gpu`: idle, 3 s of bf16
matmuls, idle. Skipped, saying why, until a recording exists."""

import json
from types import SimpleNamespace

import pytest
from helpers.real_fixtures import cases

from torchdoctor.model.record import NvmlRecord
from torchdoctor.run.probes.cuda_memory import read_cuda_memory
from torchdoctor.model.serialize import from_plain, to_plain


@pytest.mark.parametrize("rec", cases("nvml.json"))
def test_real_nvml_samples_decode_and_show_the_load(rec):
    data = json.loads((rec / "nvml.json").read_text())
    record = from_plain(NvmlRecord, data["record"])
    assert record.available and to_plain(record) == data["record"]
    samples = record.samples
    assert len(samples) >= 10 and all(a.t < b.t for a, b in zip(samples, samples[1:]))
    for s in samples:  # units as the probe converts them: percent, watts, MHz, bytes
        assert s.gpu_util is None or 0 <= s.gpu_util <= 100
        assert s.power_w is None or 0 < s.power_w < 2000
        assert s.sm_clock_mhz is None or s.sm_clock_max_mhz is None or s.sm_clock_mhz <= s.sm_clock_max_mhz
        assert s.mem_used_bytes is None or 0 < s.mem_used_bytes <= s.mem_total_bytes
    # NVML lags the load: on the H200 utilization read 1% for the first ~0.6 s of the busy phase
    # (cuBLAS start-up, the counter's averaging window) and power climbed 77 W -> 600 W over ~1 s.
    # So the second half of the busy phase is judged, where 3 s of 8192² matmuls hold the GPU.
    late = [s for s in samples if data["idle_s"] + data["busy_s"] / 2 <= s.t <= data["idle_s"] + data["busy_s"] - 0.2]
    first = [s for s in samples if s.t < data["idle_s"]]
    assert late and min(s.gpu_util for s in late) > 50
    if first[0].power_w is not None and late[-1].power_w is not None:
        assert late[-1].power_w > first[0].power_w  # the load shows in power too


@pytest.mark.parametrize("rec", cases("cuda_memory.json"))
def test_real_allocator_statistics_read_like_the_probe_read_them(rec):
    """Twin of test_reads_allocator_statistics: the recorded memory_stats() through the probe
    again give what the probe read on the device."""
    data = json.loads((rec / "cuda_memory.json").read_text())
    free, total = data["mem_get_info"]
    assert 0 < free <= total and data["doctor"] is not None  # the probe read the real allocator
    recorded = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                               memory_stats=lambda device: data["memory_stats"],
                               get_device_properties=lambda device: SimpleNamespace(
                                   total_memory=data["doctor"]["device_total_bytes"]))
    again = read_cuda_memory(0, torch_module=SimpleNamespace(cuda=recorded))
    assert to_plain(again) == data["doctor"]
    assert again.peak_allocated_bytes >= 128 * 2**20  # the 8192² bf16 operand alone
