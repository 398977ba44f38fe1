"""NVML, through one door: loading pynvml, calling it, finding torch's device in it.

Nothing here raises to its caller: a missing pynvml, a missing driver, an old driver that
lacks a function or a GPU that does not support a query all turn into NOT_AVAILABLE or a
reason string, never into a crash of the user's training. The sampler that reads a device
through this door while a script trains is `run/probes/nvml.py`.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

INSTALL_HINT = "pynvml is not installed (pip install 'torchdoctor[gpu]')"
DRIVER_MISSING = "NVIDIA driver not found"
CUDA_NOT_USED = "CUDA not in use"

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


def nvml_text(value: Any) -> str:
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
        if nvml_uuid is not NOT_AVAILABLE and _normalized_uuid(nvml_text(nvml_uuid)) == bare:
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


@contextmanager
def nvml_session(nvml: Any = None) -> Iterator[tuple[Any, str | None]]:
    """(pynvml, None) with NVML initialised for the block, then shut down; (None, reason) when
    it cannot start. For a one-off question (the topology); the sampler holds its own session."""
    module = nvml if nvml is not None else load_pynvml()
    if module is None:
        yield None, INSTALL_HINT
        return
    _, error = _call("nvmlInit", (), module)
    if error is not None:
        yield None, _init_failure_reason(error, module)
        return
    try:
        yield module, None
    finally:
        nvml_query("nvmlShutdown", nvml=module)
