"""NVML probe: samples GPU utilization, power, clocks, memory and throttle reasons on a
daemon thread while the user's script trains, through `machine.nvml` (the one door to NVML).

Nothing here raises to its caller: what NVML cannot answer becomes "not measured" (None
fields, or `NvmlRecord(available=False, reason=...)`), never a crash of the user's training.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from torchdoctor.machine.nvml import (
    EVENT_API, NOT_AVAILABLE, NVML_CLOCK_SM_DEFAULT, POWER_LIMIT_FUNCTIONS, THROTTLE_API, decode_reasons, load_pynvml,
    nvml_query, nvml_text, open_device,
)
from torchdoctor.model.record import NvmlRecord, NvmlSample

DEFAULT_INTERVAL_S = 0.1
# 20000 samples at 0.1 s is 33 minutes; beyond that the sampler thins its samples and
# its rate (see NvmlSampler._thin) so memory stays bounded and the whole run is covered.
DEFAULT_MAX_SAMPLES = 20_000
# stop() waits this long for an in-flight NVML call; the thread is a daemon either way,
# so a hung driver call can delay the report but never the interpreter's exit.
JOIN_TIMEOUT_S = 5.0

class NvmlSampler:
    """Samples one NVML device every `interval_s` on a daemon thread.

    `sample_once()` takes one sample (the thread just calls it in a loop), so tests can
    drive sampling deterministically with an injected `clock` and `nvml` module.
    Timestamps are `clock() - t0`; pass the run's t0 to align them with step timestamps
    (by default t0 is the clock at start()).
    """

    def __init__(
        self,
        handle: Any,
        clock: Callable[[], float] = time.perf_counter,
        interval_s: float = DEFAULT_INTERVAL_S,
        nvml: Any = None,
        device_index: int | None = None,
        t0: float | None = None,
        max_samples: int = DEFAULT_MAX_SAMPLES,
        shutdown_on_stop: bool = True,
    ) -> None:
        self.handle = handle
        self.clock = clock
        self.interval_s = interval_s
        self.nvml = nvml
        self.device_index = device_index
        self.t0 = t0
        self.max_samples = max(2, max_samples)
        self.shutdown_on_stop = shutdown_on_stop
        self.samples: list[NvmlSample] = []
        self.errors = 0  # unexpected exceptions inside a sample; the thread carries on
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._record: NvmlRecord | None = None
        self._device_name: str | None = None
        self._sm_clock_max: float | None = None
        # Which of two alternative functions answered, so later samples call only that one.
        self._reasons_api: tuple[str, str] | None = None
        self._power_limit_fn: str | None = None

    def _query(self, fn_name: str, *args: Any) -> Any:
        return nvml_query(fn_name, *args, nvml=self.nvml)

    # ---- one sample -------------------------------------------------------------------

    def _utilization(self) -> tuple[float | None, float | None]:
        rates = self._query("nvmlDeviceGetUtilizationRates", self.handle)
        if rates is NOT_AVAILABLE:
            return None, None
        gpu, mem = getattr(rates, "gpu", None), getattr(rates, "memory", None)
        return (float(gpu) if gpu is not None else None, float(mem) if mem is not None else None)

    def _power_w(self) -> float | None:
        milliwatts = self._query("nvmlDeviceGetPowerUsage", self.handle)
        return None if milliwatts is NOT_AVAILABLE else milliwatts / 1000.0

    def _power_limit_w(self) -> float | None:
        for fn_name in [self._power_limit_fn] if self._power_limit_fn else POWER_LIMIT_FUNCTIONS:
            milliwatts = self._query(fn_name, self.handle)
            if milliwatts is not NOT_AVAILABLE:
                self._power_limit_fn = fn_name
                return milliwatts / 1000.0
        return None

    def _sm_clocks(self) -> tuple[float | None, float | None]:
        sm = getattr(self.nvml or load_pynvml(), "NVML_CLOCK_SM", NVML_CLOCK_SM_DEFAULT)
        current = self._query("nvmlDeviceGetClockInfo", self.handle, sm)
        if self._sm_clock_max is None:  # the maximum never changes: ask once it has answered
            maximum = self._query("nvmlDeviceGetMaxClockInfo", self.handle, sm)
            self._sm_clock_max = None if maximum is NOT_AVAILABLE else float(maximum)
        return (None if current is NOT_AVAILABLE else float(current)), self._sm_clock_max

    def _memory(self) -> tuple[int | None, int | None]:
        info = self._query("nvmlDeviceGetMemoryInfo", self.handle)
        if info is NOT_AVAILABLE:
            return None, None
        used, total = getattr(info, "used", None), getattr(info, "total", None)
        return (int(used) if used is not None else None, int(total) if total is not None else None)

    def _throttle_reasons(self) -> list[str]:
        # Drivers ≥ 535 have the "event reasons" API; older ones only the "throttle" one.
        # A new pynvml on an old driver has both Python functions, but the new one fails
        # with FunctionNotFound, so try in order and remember what answered.
        for fn_name, prefix in [self._reasons_api] if self._reasons_api else (EVENT_API, THROTTLE_API):
            bits = self._query(fn_name, self.handle)
            if bits is not NOT_AVAILABLE:
                self._reasons_api = (fn_name, prefix)
                return decode_reasons(int(bits), prefix, self.nvml or load_pynvml())
        return []

    def sample_once(self) -> NvmlSample | None:
        """Take one sample and keep it; None (and `errors` counted) if anything went wrong."""
        try:
            now = self.clock()
            if self.t0 is None:  # sampled without start(): time from this first sample
                self.t0 = now
            t = now - self.t0
            gpu_util, mem_util = self._utilization()
            sm_clock, sm_clock_max = self._sm_clocks()
            mem_used, mem_total = self._memory()
            sample = NvmlSample(
                t=t, gpu_util=gpu_util, mem_util=mem_util,
                power_w=self._power_w(), power_limit_w=self._power_limit_w(),
                sm_clock_mhz=sm_clock, sm_clock_max_mhz=sm_clock_max,
                mem_used_bytes=mem_used, mem_total_bytes=mem_total,
                throttle_reasons=self._throttle_reasons(),
            )
        except Exception:
            self.errors += 1
            return None
        with self._lock:
            self.samples.append(sample)
            if len(self.samples) >= self.max_samples:
                self._thin()
        return sample

    def _thin(self) -> None:
        """Keep every other sample and halve the rate: bounded memory, whole run still covered."""
        self.samples = self.samples[::2]
        self.interval_s *= 2

    # ---- thread lifecycle -------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop_event.is_set():
            self.sample_once()
            self._stop_event.wait(self.interval_s)

    def start(self) -> None:
        if self._thread is not None or self._record is not None:
            return
        try:
            if self.t0 is None:
                self.t0 = self.clock()
            name = self._query("nvmlDeviceGetName", self.handle)
            self._device_name = None if name is NOT_AVAILABLE else nvml_text(name)
            self._thread = threading.Thread(target=self._run, name="torchdoctor-nvml", daemon=True)
            self._thread.start()
        except Exception:
            self._thread = None  # e.g. no thread can be started: the record just has no samples

    def stop(self) -> NvmlRecord:
        """Stop sampling and return what was measured; later calls return the same record."""
        if self._record is not None:
            return self._record
        self._stop_event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)
        if self.shutdown_on_stop and not (thread is not None and thread.is_alive()):
            self._query("nvmlShutdown")  # releases the nvmlInit that open_device made
        with self._lock:
            samples = list(self.samples)
        self._record = NvmlRecord(
            available=True, device_index=self.device_index, device_name=self._device_name,
            interval_s=self.interval_s, samples=samples,
        )
        return self._record

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def unavailable(reason: str) -> NvmlRecord:
    """The record for a run where NVML could not sample, saying why."""
    return NvmlRecord(available=False, reason=reason)


def sample_device(torch_device_index: int | None, clock: Callable[[], float] = time.perf_counter,
                  nvml: Any = None, torch_module: Any = None, **sampler_options: Any) -> NvmlSampler | NvmlRecord:
    """open_device + NvmlSampler: a started sampler, or the unavailable record saying why."""
    handle, reason = open_device(torch_device_index, nvml=nvml, torch_module=torch_module)
    if handle is None:
        return unavailable(reason)
    sampler = NvmlSampler(handle, clock=clock, nvml=nvml, device_index=torch_device_index, **sampler_options)
    sampler.start()
    return sampler
