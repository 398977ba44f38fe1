"""GpuProbe with a fake torch.cuda and a fake NVML: sampling starts at the first CUDA
step, shares the run's time origin, and stops with the other probes."""

import types

import pytest

from helpers.gpu_fakes import FakeCuda, FakeNvml
from torchdoctor.run.probes.gpu import GpuProbe
from torchdoctor.model.record import Environment, RunInfo, RunRecord


def _record():
    info = RunInfo(script="t.py", argv=[], cwd="/", started_at="x", torchdoctor_version="0", warmup=0,
                   steps_requested=1, max_seconds=1.0)
    return RunRecord(run=info, environment=Environment(python="3", platform="p", torch="t", cuda_available=True))


def test_no_sampling_until_cuda_is_initialized():
    cuda = FakeCuda(initialized=False)
    probe = GpuProbe(clock=lambda: 10.0, t0=4.0, torch_module=types.SimpleNamespace(cuda=cuda), nvml=FakeNvml())
    probe.on_step()
    assert not probe.cuda_in_use
    record = _record()
    probe.contribute(record)
    assert record.nvml.available is False and "not used" in record.nvml.reason and record.cuda_memory is None


def test_sampling_shares_the_run_time_origin_and_stops_on_uninstall():
    cuda = FakeCuda(initialized=True)
    probe = GpuProbe(clock=lambda: 10.0, t0=4.0, torch_module=types.SimpleNamespace(cuda=cuda), nvml=FakeNvml())
    probe.on_step()
    assert probe.cuda_in_use and probe.sampler is not None
    probe.uninstall()
    record = _record()
    probe.contribute(record)
    assert record.nvml.available and record.nvml.samples
    assert all(s.t == 6.0 for s in record.nvml.samples)
    assert record.nvml.samples[0].power_w == 200.0 and record.nvml.samples[0].power_limit_w == 450.0
    assert record.cuda_memory.peak_reserved_bytes == 2 * 2**30


def test_a_rank_samples_the_gpu_its_model_is_on_not_the_current_device():
    """A rank that moved its model with .to(local_rank) without set_device: torch's current device is 0
    in every rank; the rank's GPU is the one its allocator holds the most on (a barrier's tensor on 0
    weighs less), and NVML is asked about that one."""
    from helpers.gpu_fakes import GIB, sampled_probe

    nvml = FakeNvml(figures={0: (10, 90_000, 5 * GIB), 1: (95, 380_000, 60 * GIB)})
    rank1 = sampled_probe(FakeCuda(current=0, devices=2, allocated={0: 512, 1: 3 * GIB}), nvml)
    assert rank1.device_index == 1
    sample = rank1.latest_sample()
    assert (sample.gpu_util, sample.power_w, sample.mem_used_bytes) == (95.0, 380.0, 60 * GIB)
    rank0 = sampled_probe(FakeCuda(current=0, devices=2, allocated={0: 3 * GIB}), nvml)
    assert rank0.device_index == 0 and rank0.latest_sample().gpu_util == 10.0
    # nothing allocated yet (CUDA initialised by a query): the current device
    assert sampled_probe(FakeCuda(current=1, devices=2), nvml).device_index == 1


def test_no_sample_without_nvml_is_none_never_a_number():
    from helpers.gpu_fakes import sampled_probe

    probe = sampled_probe(FakeCuda(), FakeNvml(init_error=True))
    assert probe.cuda_in_use and probe.sampler is None and probe.latest_sample() is None
    assert "NVML could not be initialised" in probe.nvml_reason


@pytest.mark.gpu
def test_on_a_real_gpu_the_device_in_use_is_the_one_holding_the_model():
    """torch's own allocator figures (not a fake's): the device a tensor lives on is found, whatever
    the current device is."""
    import torch

    from torchdoctor.run.probes.gpu import device_in_use

    last = torch.cuda.device_count() - 1
    held = torch.empty(64, 2**20, device=f"cuda:{last}")  # 256 MiB on the last device
    torch.cuda.set_device(0)
    assert device_in_use(torch.cuda) == last
    del held
