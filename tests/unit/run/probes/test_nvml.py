"""NVML probe against a fake pynvml module: units, both throttle-reason APIs, unsupported
queries, missing pynvml/driver, device matching and the sampler thread's lifecycle."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace

import pytest

from torchdoctor.machine import nvml as nvml_door
from torchdoctor.machine.nvml import CUDA_NOT_USED, INSTALL_HINT, NOT_AVAILABLE, decode_reasons, nvml_query, open_device
from torchdoctor.run.probes.nvml import NvmlSampler, sample_device
from torchdoctor.model.record import NvmlRecord

GIB = 1024**3
UUID_0 = "11111111-2222-3333-4444-555555555555"
UUID_1 = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


class FakeNVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNotSupported(FakeNVMLError):
    def __init__(self):
        super().__init__(3)


class FakeFunctionNotFound(FakeNVMLError):
    def __init__(self):
        super().__init__(13)


NEW_CONSTANTS = {"nvmlClocksEventReasonGpuIdle": 0x1, "nvmlClocksEventReasonSwPowerCap": 0x4,
                 "nvmlClocksEventReasonHwSlowdown": 0x8, "nvmlClocksEventReasonHwThermalSlowdown": 0x40}
OLD_CONSTANTS = {"nvmlClocksThrottleReasonGpuIdle": 0x1, "nvmlClocksThrottleReasonSwPowerCap": 0x4,
                 "nvmlClocksThrottleReasonHwSlowdown": 0x8,
                 "nvmlClocksThrottleReasonHwThermalSlowdown": 0x40}


class FakeNvml:
    """A stand-in for the pynvml module: two GPUs, with knobs for what a driver lacks.

    reasons_api: "new" (event reasons only), "old" (throttle reasons only), "both", or
    "new-fails" (the new Python function exists but the old driver lacks the symbol).
    """

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_DRIVER_NOT_LOADED = 9

    def __init__(self, reasons_api="both", reason_bits=0x0, unsupported=(), missing=(), init_error=None):
        self.reason_bits = reason_bits
        self.unsupported = set(unsupported)
        self.init_error = init_error
        self.calls: list[str] = []
        self.power_mw = 123_456
        self.uuids = [f"GPU-{UUID_0}", f"GPU-{UUID_1}"]
        if reasons_api in ("new", "both", "new-fails"):
            for name, bit in NEW_CONSTANTS.items():
                setattr(self, name, bit)
            self.nvmlDeviceGetCurrentClocksEventReasons = self._event_reasons
        if reasons_api in ("old", "both", "new-fails"):
            for name, bit in OLD_CONSTANTS.items():
                setattr(self, name, bit)
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._throttle_reasons
        self.new_api_fails = reasons_api == "new-fails"
        self.missing = set(missing)

    def __getattribute__(self, name):
        # Functions listed in `missing` do not exist, as in an older pynvml release.
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _answer(self, name, value):
        self.calls.append(name)
        if name in self.unsupported:
            raise FakeNotSupported()
        return value

    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        return self._answer("nvmlDeviceGetCount", len(self.uuids))

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= len(self.uuids):
            raise FakeNVMLError(2)
        return self._answer("nvmlDeviceGetHandleByIndex", f"handle{index}")

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.uuids:  # real NVML wants the "GPU-" prefix
            raise FakeNVMLError(6)
        return self._answer("nvmlDeviceGetHandleByUUID", f"handle{self.uuids.index(uuid)}")

    def nvmlDeviceGetUUID(self, handle):
        return self._answer("nvmlDeviceGetUUID", self.uuids[int(handle[-1])].encode())

    def nvmlDeviceGetName(self, handle):
        return self._answer("nvmlDeviceGetName", b"NVIDIA H100 80GB HBM3")

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self._answer("nvmlDeviceGetUtilizationRates", SimpleNamespace(gpu=87, memory=41))

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._answer("nvmlDeviceGetPowerUsage", self.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._answer("nvmlDeviceGetEnforcedPowerLimit", 700_000)

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._answer("nvmlDeviceGetPowerManagementLimit", 650_000)

    def nvmlDeviceGetClockInfo(self, handle, clock_type):
        assert clock_type == self.NVML_CLOCK_SM
        return self._answer("nvmlDeviceGetClockInfo", 1755)

    def nvmlDeviceGetMaxClockInfo(self, handle, clock_type):
        assert clock_type == self.NVML_CLOCK_SM
        return self._answer("nvmlDeviceGetMaxClockInfo", 1980)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._answer("nvmlDeviceGetMemoryInfo", SimpleNamespace(total=80 * GIB, used=12 * GIB, free=68 * GIB))

    def _event_reasons(self, handle):
        if self.new_api_fails:
            self.calls.append("nvmlDeviceGetCurrentClocksEventReasons")
            raise FakeFunctionNotFound()
        return self._answer("nvmlDeviceGetCurrentClocksEventReasons", self.reason_bits)

    def _throttle_reasons(self, handle):
        return self._answer("nvmlDeviceGetCurrentClocksThrottleReasons", self.reason_bits)


def fake_torch(available=True, uuid=UUID_1):
    props = SimpleNamespace(uuid=uuid, total_memory=80 * GIB) if uuid is not None else SimpleNamespace(total_memory=1)
    cuda = SimpleNamespace(is_available=lambda: available, get_device_properties=lambda i: props)
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(hip=None))


def stepping_clock(*values):
    """A clock returning exactly these values, one per call."""
    it = iter(values)
    return lambda: next(it)


# ---- nvml_query -------------------------------------------------------------------------

def test_query_returns_value_or_not_available():
    fake = FakeNvml(unsupported={"nvmlDeviceGetPowerUsage"}, missing={"nvmlDeviceGetEnforcedPowerLimit"})
    assert nvml_query("nvmlDeviceGetClockInfo", "handle0", 1, nvml=fake) == 1755
    assert nvml_query("nvmlDeviceGetPowerUsage", "handle0", nvml=fake) is NOT_AVAILABLE
    assert nvml_query("nvmlDeviceGetEnforcedPowerLimit", "handle0", nvml=fake) is NOT_AVAILABLE
    assert nvml_query("nvmlNoSuchFunction", nvml=fake) is NOT_AVAILABLE


def test_query_swallows_any_exception():
    def boom(*args):
        raise ValueError("ctypes trouble")

    assert nvml_query("nvmlDeviceGetPowerUsage", "h", nvml=SimpleNamespace(nvmlDeviceGetPowerUsage=boom)) is NOT_AVAILABLE


# ---- one sample ----------------------------------------------------------------------------

def test_sample_converts_units():
    sampler = NvmlSampler("handle0", clock=stepping_clock(0.5), t0=0.0, nvml=FakeNvml())
    s = sampler.sample_once()
    assert s.t == 0.5
    assert (s.gpu_util, s.mem_util) == (87.0, 41.0)
    assert s.power_w == pytest.approx(123.456)  # mW -> W
    assert s.power_limit_w == 700.0
    assert (s.sm_clock_mhz, s.sm_clock_max_mhz) == (1755.0, 1980.0)
    assert (s.mem_used_bytes, s.mem_total_bytes) == (12 * GIB, 80 * GIB)
    assert s.throttle_reasons == []
    assert sampler.samples == [s]


@pytest.mark.parametrize("api", ["new", "old", "both", "new-fails"])
def test_throttle_reasons_decoded_with_either_api(api):
    fake = FakeNvml(reasons_api=api, reason_bits=0x4 | 0x8 | 0x40)
    sampler = NvmlSampler("handle0", clock=stepping_clock(1.0, 2.0), t0=0.0, nvml=fake)
    assert sampler.sample_once().throttle_reasons == ["sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"]
    assert sampler.sample_once().throttle_reasons == ["sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"]
    if api == "new-fails":  # the failing new function is tried once, then only the old one
        assert fake.calls.count("nvmlDeviceGetCurrentClocksEventReasons") == 1
        assert fake.calls.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 2


def test_decode_reasons_names_every_bit_and_keeps_unknown_ones():
    names = decode_reasons(0x1FF | 0x800, "nvmlClocksEventReason", nvml=None)
    assert names == ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                     "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                     "display_clock_setting", "other_0x800"]


def test_unsupported_queries_give_none_not_a_crash():
    fake = FakeNvml(unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates",
                                 "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetCurrentClocksEventReasons",
                                 "nvmlDeviceGetCurrentClocksThrottleReasons"})
    s = NvmlSampler("handle0", clock=stepping_clock(1.0), t0=0.0, nvml=fake).sample_once()
    assert s.power_w is None and s.gpu_util is None and s.mem_util is None and s.sm_clock_max_mhz is None
    assert s.throttle_reasons == []
    assert s.sm_clock_mhz == 1755.0 and s.mem_total_bytes == 80 * GIB  # the supported ones still answer


def test_power_limit_falls_back_to_management_limit():
    fake = FakeNvml(missing={"nvmlDeviceGetEnforcedPowerLimit"})
    s = NvmlSampler("handle0", clock=stepping_clock(1.0), t0=0.0, nvml=fake).sample_once()
    assert s.power_limit_w == 650.0


def test_injected_clock_gives_exact_timestamps():
    sampler = NvmlSampler("handle0", clock=stepping_clock(10.25, 10.5, 11.0), t0=10.0, nvml=FakeNvml())
    for _ in range(3):
        sampler.sample_once()
    assert [s.t for s in sampler.samples] == [0.25, 0.5, 1.0]


def test_t0_defaults_to_the_clock_at_start():
    sampler = NvmlSampler("handle0", clock=stepping_clock(100.0, 100.5), nvml=FakeNvml())
    sampler.sample_once()  # first call sets t0 from the clock when start() has not
    assert sampler.samples[0].t == 0.0


def test_a_failing_sample_is_counted_not_raised():
    def broken_clock():
        raise RuntimeError("clock broke")

    sampler = NvmlSampler("handle0", clock=broken_clock, t0=0.0, nvml=FakeNvml())
    assert sampler.sample_once() is None
    assert sampler.errors == 1 and sampler.samples == []


def test_samples_are_capped_by_thinning():
    ticks = iter(float(i) for i in range(1, 1000))
    sampler = NvmlSampler("handle0", clock=lambda: next(ticks), t0=0.0, nvml=FakeNvml(), max_samples=8)
    for _ in range(50):
        sampler.sample_once()
    times = [s.t for s in sampler.samples]
    assert len(times) < 8
    assert times == sorted(times) and times[0] == 1.0 and times[-1] > 40  # whole run still covered
    assert sampler.interval_s > 0.1  # the rate dropped to match


# ---- thread lifecycle ----------------------------------------------------------------------

def test_thread_samples_and_stops_cleanly():
    fake = FakeNvml()
    sampler = NvmlSampler("handle1", interval_s=0.005, nvml=fake, device_index=1)
    sampler.start()
    deadline = time.monotonic() + 5.0
    while len(sampler.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    record = sampler.stop()
    assert not sampler.running
    assert not [t for t in threading.enumerate() if t.name == "torchdoctor-nvml"]
    assert record.available and record.device_index == 1
    assert record.device_name == "NVIDIA H100 80GB HBM3"
    assert len(record.samples) >= 3
    ts = [s.t for s in record.samples]
    assert ts == sorted(ts) and ts[0] >= 0.0
    assert sampler.stop() is record  # idempotent
    assert fake.calls.count("nvmlShutdown") == 1  # the open_device init released once


def test_stop_without_start_returns_an_empty_record():
    sampler = NvmlSampler("handle0", nvml=FakeNvml())
    record = sampler.stop()
    assert record.available and record.samples == []
    assert sampler.stop() is record
    sampler.start()  # after stop: does nothing, starts no thread
    assert not sampler.running


# ---- open_device ---------------------------------------------------------------------------

def test_pynvml_missing_gives_unavailable_record(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    monkeypatch.setattr(nvml_door, "_pynvml_module", nvml_door._UNSET)
    handle, reason = open_device(0, torch_module=fake_torch())
    assert handle is None and reason == INSTALL_HINT
    record = sample_device(0, torch_module=fake_torch())
    assert record == NvmlRecord(available=False, reason=INSTALL_HINT)
    assert "pip install 'torchdoctor[gpu]'" in record.reason
    assert nvml_query("nvmlInit") is NOT_AVAILABLE


def test_cuda_not_in_use():
    assert open_device(0, nvml=FakeNvml(), torch_module=fake_torch(available=False)) == (None, CUDA_NOT_USED)
    assert open_device(None, nvml=FakeNvml(), torch_module=fake_torch()) == (None, CUDA_NOT_USED)


def test_cuda_not_in_use_on_this_cpu_torch():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert open_device(0) == (None, CUDA_NOT_USED)


@pytest.mark.parametrize("code", [12, 9])
def test_driver_not_found(code):
    handle, reason = open_device(0, nvml=FakeNvml(init_error=code), torch_module=fake_torch())
    assert handle is None and reason.startswith("NVIDIA driver not found")


def test_other_init_failure_is_reported():
    handle, reason = open_device(0, nvml=FakeNvml(init_error=4), torch_module=fake_torch())
    assert handle is None and reason.startswith("NVML could not be initialised")


def test_device_matched_by_uuid_not_index():
    # torch's device 0 is NVML's device 1 (as under CUDA_VISIBLE_DEVICES=1); torch prints no "GPU-".
    handle, note = open_device(0, nvml=FakeNvml(), torch_module=fake_torch(uuid=UUID_1))
    assert handle == "handle1" and "UUID" in note


def test_device_matched_by_scanning_uuids_when_lookup_is_missing():
    fake = FakeNvml(missing={"nvmlDeviceGetHandleByUUID"})
    handle, _ = open_device(0, nvml=fake, torch_module=fake_torch(uuid=UUID_1.upper()))
    assert handle == "handle1"


def test_index_fallback_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    handle, note = open_device(0, nvml=FakeNvml(), torch_module=fake_torch(uuid=None))
    assert handle == "handle1" and "index 1" in note


def test_no_matching_device_releases_nvml():
    fake = FakeNvml()
    fake.uuids = []
    handle, reason = open_device(0, nvml=fake, torch_module=fake_torch())
    assert handle is None and "no NVML device" in reason
    assert fake.calls.count("nvmlInit") == fake.calls.count("nvmlShutdown") == 1


def test_sample_device_starts_a_sampler_for_the_matched_gpu():
    fake = FakeNvml()
    sampler = sample_device(0, nvml=fake, torch_module=fake_torch(uuid=UUID_1), interval_s=0.01)
    try:
        assert isinstance(sampler, NvmlSampler) and sampler.handle == "handle1"
    finally:
        record = sampler.stop()
    assert record.available and record.device_index == 0


# ---- a real GPU ----------------------------------------------------------------------------

@pytest.mark.gpu
def test_real_gpu_reports_power():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    index = torch.cuda.current_device()
    x = torch.randn(4096, 4096, device=f"cuda:{index}")  # creates the context, gives the GPU work
    handle, reason = open_device(index)
    if handle is None:
        pytest.skip(f"NVML not usable here: {reason}")
    sampler = NvmlSampler(handle, interval_s=0.05, device_index=index)
    sampler.start()
    try:
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            x = (x @ x).tanh_()
        torch.cuda.synchronize(index)
    finally:
        record = sampler.stop()
    assert not sampler.running
    assert record.available and record.samples and record.device_name
    powers = [s.power_w for s in record.samples if s.power_w is not None]
    assert powers and max(powers) > 0
