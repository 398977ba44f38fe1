"""A fake torch.cuda and a fake pynvml, injected into the GPU probe (run/probes/gpu.py) and the NVML
door (machine/nvml.py) so per-device behaviour is tested on a machine without a GPU."""

import types

GIB = 2**30


class FakeCuda:
    """`devices` GPUs; `current` is torch's current device, `allocated` the bytes this process's
    allocator holds on each device."""

    def __init__(self, initialized=True, current=0, devices=1, allocated=None, available=True):
        self.initialized, self.current, self.devices, self.available = initialized, current, devices, available
        self.allocated = allocated or {}

    def is_available(self):
        return self.available

    def is_initialized(self):
        return self.initialized

    def current_device(self):
        return self.current

    def device_count(self):
        return self.devices

    def memory_allocated(self, i):
        return self.allocated.get(i, 0)

    def get_device_properties(self, i):
        return types.SimpleNamespace(uuid=f"GPU-000{i}", total_memory=80 * GIB, name="Fake", major=9, minor=0)

    def memory_stats(self, i):
        return {"allocated_bytes.all.peak": GIB, "reserved_bytes.all.peak": 2 * GIB,
                "num_alloc_retries": 0, "num_ooms": 0, "inactive_split_bytes.all.current": 0}

    def reset_peak_memory_stats(self, i):
        pass


class FakeNvml:
    """NVML answering for each device its own figures: `figures[i]` = (utilization %, power mW,
    memory used bytes); the power limit 450 W, 80 GiB each. `init_error`: NVML cannot start."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self, figures=None, init_error=False):
        self.figures = figures or {0: (40, 200_000, 30 * GIB)}
        self.init_error = init_error

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError("driver not loaded")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.rsplit("-", 1)[1])  # "GPU-000<i>": the handle is the device's index

    def nvmlDeviceGetName(self, handle):
        return f"Fake {handle}"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return types.SimpleNamespace(gpu=self.figures[handle][0], memory=10)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.figures[handle][1]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 450_000

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=self.figures[handle][2], total=80 * GIB)


def torch_with(cuda):
    return types.SimpleNamespace(cuda=cuda)


def sampled_probe(cuda, nvml, clock=lambda: 10.0, t0=4.0):
    """A GpuProbe that saw its first CUDA step, with one NVML sample taken (its thread stopped first,
    so the sample is the test's, not a race with the thread)."""
    from torchdoctor.run.probes.gpu import GpuProbe

    probe = GpuProbe(clock=clock, t0=t0, torch_module=torch_with(cuda), nvml=nvml)
    probe.on_step()
    if probe.sampler is not None:
        probe.sampler.stop()
        probe.sampler.sample_once()
    return probe
