"""GpuProbe with a fake torch.cuda and a fake NVML: sampling starts at the first CUDA
step, shares the run's time origin, and stops with the other probes."""

import types

from torchdoctor.run.probes.gpu import GpuProbe
from torchdoctor.model.record import Environment, RunInfo, RunRecord


class FakeCuda:
    def __init__(self, initialized):
        self.initialized = initialized

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialized

    def current_device(self):
        return 0

    def get_device_properties(self, i):
        return types.SimpleNamespace(uuid="GPU-1234", total_memory=80 * 2**30, name="Fake", major=9, minor=0)

    def memory_stats(self, i):
        return {"allocated_bytes.all.peak": 2**30, "reserved_bytes.all.peak": 2 * 2**30,
                "num_alloc_retries": 0, "num_ooms": 0, "inactive_split_bytes.all.current": 0}

    def reset_peak_memory_stats(self, i):
        pass


class FakeNvml:
    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return "handle"

    def nvmlDeviceGetUUID(self, handle):
        return "GPU-1234"

    def nvmlDeviceGetName(self, handle):
        return "Fake"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return types.SimpleNamespace(gpu=40, memory=10)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 200_000

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 450_000


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
