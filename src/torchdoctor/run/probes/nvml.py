"""NVML probe: samples GPU utilization, power, clocks, memory and throttle reasons on a
daemon thread while the user's script trains.

Nothing here raises to its caller: a missing pynvml, a missing driver, an old driver that
lacks a function or a GPU that does not support a query all turn into "not measured"
(None fields, or `NvmlRecord(available=False, reason=...)`), never into a crash of the
user's training.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Any, Callable

from torchdoctor.record import NvmlRecord, NvmlSample

INSTALL_HINT = "pynvml is not installed (pip install 'torchdoctor[gpu]')"
DRIVER_MISSING = "NVIDIA driver not found"
CUDA_NOT_USED = "CUDA not in use"

DEFAULT_INTERVAL_S = 0.1
# 20000 samples at 0.1 s is 33 minutes; beyond that the sampler thins its samples and
# its rate (see NvmlSampler._thin) so memory stays bounded and the whole run is covered.
DEFAULT_MAX_SAMPLES = 20_000
# stop() waits this long for an in-flight NVML call; the thread is a daemon either way,
# so a hung driver call can delay the report but never the interpreter's exit.
JOIN_TIMEOUT_S = 5.0

# nvml.h values, used when a pynvml build lacks a constant (they never change meaning).
NVML_CLOCK_SM_DEFAULT = 1
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12

# Clock event ("throttle") reason bits: (pynvml constant suffix, our name, nvml.h bit).
# The new API names them nvmlClocksEventReason*, the old (deprecated since driver 535)
# nvmlClocksThrottleReason*; the bits are the same.
REASON_BITS: tuple[tuple[str, str, int], ...] = (
    ("GpuIdle", "gpu_idle", 0x1),
    ("ApplicationsClocksSetting", "applications_clocks_setting", 0x2),
    ("SwPowerCap", "sw_power_cap", 0x4),
    ("HwSlowdown", "hw_slowdown", 0x8),
    ("SyncBoost", "sync_boost", 0x10),
    ("SwThermalSlowdown", "sw_thermal_slowdown", 0x20),
    ("HwThermalSlowdown", "hw_thermal_slowdown", 0x40),
    ("HwPowerBrakeSlowdown", "hw_power_brake_slowdown", 0x80),
    ("DisplayClockSetting", "display_clock_setting", 0x100),
    ("BoardLimit", "board_limit", 0x200),
    ("Reliability", "reliability", 0x400),
)
EVENT_API = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlClocksEventReason")
THROTTLE_API = ("nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlClocksThrottleReason")
POWER_LIMIT_FUNCTIONS = ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit")


class _NotAvailable:
    """Sentinel for "NVML could not answer"; distinct from None, which NVML never returns."""

    _instance: "_NotAvailable | None" = None

    def __new__(cls) -> "_NotAvailable":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_AVAILABLE"

    def __bool__(self) -> bool:
        return False


NOT_AVAILABLE = _NotAvailable()

_UNSET = object()
_pynvml_module: Any = _UNSET  # the imported pynvml, or None when it is not installed


def load_pynvml() -> Any:
    """The real pynvml module, or None when it is not installed (imported once)."""
    global _pynvml_module
    if _pynvml_module is _UNSET:
        try:
            # The old unofficial `pynvml` wrapper warns on import; that is not the user's concern.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pynvml
            _pynvml_module = pynvml
        except Exception:  # ImportError, or a broken install raising anything else
            _pynvml_module = None
    return _pynvml_module


def _call(fn_name: str, args: tuple, nvml: Any) -> tuple[Any, BaseException | None]:
    """The one place that calls NVML: (value, None) or (NOT_AVAILABLE, why)."""
    module = nvml if nvml is not None else load_pynvml()
    if module is None:
        return NOT_AVAILABLE, ImportError(INSTALL_HINT)
    fn = getattr(module, fn_name, None)
    if fn is None:  # this pynvml release predates (or has dropped) the function
        return NOT_AVAILABLE, AttributeError(f"pynvml has no {fn_name}")
    try:
        return fn(*args), None
    except Exception as exc:  # NVMLError (NotSupported, FunctionNotFound, ...) or ctypes trouble
        return NOT_AVAILABLE, exc


def nvml_query(fn_name: str, *args: Any, nvml: Any = None) -> Any:
    """Call `pynvml.<fn_name>(*args)`; NOT_AVAILABLE instead of any error."""
    return _call(fn_name, args, nvml)[0]


def _text(value: Any) -> str:
    """pynvml returned bytes for names and UUIDs before 11.x; str since."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _normalized_uuid(uuid: str) -> str:
    """NVML says "GPU-<hex>" (or "MIG-<hex>"); torch prints the bare hex: compare the hex."""
    uuid = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if uuid.startswith(prefix):
            return uuid[len(prefix):]
    return uuid


def _init_failure_reason(exc: BaseException | None, nvml: Any) -> str:
    code = getattr(exc, "value", None)
    missing = {getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND),
               getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED)}
    if code in missing:
        return f"{DRIVER_MISSING} (NVML could not be initialised: {exc})"
    return f"NVML could not be initialised: {exc}"


def _torch_uuid(torch_module: Any, index: int) -> str | None:
    try:
        uuid = getattr(torch_module.cuda.get_device_properties(index), "uuid", None)
    except Exception:
        return None
    return str(uuid) if uuid is not None else None


def _handle_by_uuid(uuid: str, nvml: Any) -> Any:
    """NVML's handle for a torch UUID, by direct lookup and then by scanning every device."""
    bare = _normalized_uuid(uuid)
    for candidate in (f"GPU-{bare}", f"MIG-{bare}", uuid):
        handle = nvml_query("nvmlDeviceGetHandleByUUID", candidate, nvml=nvml)
        if handle is not NOT_AVAILABLE:
            return handle
    count = nvml_query("nvmlDeviceGetCount", nvml=nvml)
    for i in range(count if isinstance(count, int) else 0):
        handle = nvml_query("nvmlDeviceGetHandleByIndex", i, nvml=nvml)
        if handle is NOT_AVAILABLE:
            continue
        nvml_uuid = nvml_query("nvmlDeviceGetUUID", handle, nvml=nvml)
        if nvml_uuid is not NOT_AVAILABLE and _normalized_uuid(_text(nvml_uuid)) == bare:
            return handle
    return NOT_AVAILABLE


def _fallback_nvml_index(torch_index: int) -> int:
    """Best guess at NVML's index for a torch index when UUIDs cannot be compared.

    NVML numbers every GPU in PCI order and ignores CUDA_VISIBLE_DEVICES; torch numbers only
    the visible ones. A plain integer list in CUDA_VISIBLE_DEVICES gives the mapping.
    """
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if torch_index < len(visible) and all(v.isdigit() for v in visible):
        return int(visible[torch_index])
    return torch_index


def open_device(torch_device_index: int | None, nvml: Any = None, torch_module: Any = None) -> tuple[Any, str]:
    """Initialise NVML and find the handle of torch's CUDA device `torch_device_index`.

    Returns (handle, note) on success (the note says how the device was matched) or
    (None, reason). A successful open holds one NVML initialisation; the NvmlSampler made
    from the handle releases it in stop().
    """
    try:
        if torch_module is None:
            import torch as torch_module
        if torch_device_index is None or not torch_module.cuda.is_available():
            return None, CUDA_NOT_USED
        if getattr(getattr(torch_module, "version", None), "hip", None):
            return None, "ROCm device: NVML applies to NVIDIA GPUs only"
        if nvml is None:
            nvml = load_pynvml()
            if nvml is None:
                return None, INSTALL_HINT
        _, init_error = _call("nvmlInit", (), nvml)
        if init_error is not None:
            return None, _init_failure_reason(init_error, nvml)

        uuid = _torch_uuid(torch_module, torch_device_index)
        if uuid:
            handle = _handle_by_uuid(uuid, nvml)
            if handle is not NOT_AVAILABLE:
                return handle, f"matched CUDA device {torch_device_index} to NVML by UUID {uuid}"
        nvml_index = _fallback_nvml_index(torch_device_index)
        handle = nvml_query("nvmlDeviceGetHandleByIndex", nvml_index, nvml=nvml)
        if handle is not NOT_AVAILABLE:
            why = "torch did not report a UUID" if not uuid else f"no NVML device has UUID {uuid}"
            return handle, (f"matched CUDA device {torch_device_index} to NVML index {nvml_index} "
                            f"({why}); the GPU may be misidentified when CUDA and NVML order devices differently")
        nvml_query("nvmlShutdown", nvml=nvml)  # pair the nvmlInit above: no handle, no sampler to release it
        return None, f"no NVML device matches CUDA device {torch_device_index}"
    except Exception as exc:  # never let device discovery break the user's run
        return None, f"NVML device lookup failed: {exc!r}"


def decode_reasons(bits: int, constant_prefix: str, nvml: Any) -> list[str]:
    """Names of the set bits of a clock event/throttle reason mask, in bit order."""
    names = []
    known = 0
    for suffix, name, default_bit in REASON_BITS:
        bit = getattr(nvml, constant_prefix + suffix, default_bit)
        known |= bit
        if bits & bit:
            names.append(name)
    if bits & ~known:  # a reason newer than this table: keep it visible rather than drop it
        names.append(f"other_0x{bits & ~known:x}")
    return names


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
            self._device_name = None if name is NOT_AVAILABLE else _text(name)
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
