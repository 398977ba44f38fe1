"""Memory sizes the user types (`24GiB`, `80GB`: model/units.py's one rule) and the GPUs `--for-gpu` knows.
Torch-free."""

from __future__ import annotations

from torchdoctor.errors import UsageError
from torchdoctor.model.units import MIB, SIZE_RULE, parse_bytes

SMALLEST = MIB  # below a MiB no training step fits: a typo

# Memory as NVML / nvidia-smi reports it ("Memory Total", MiB): a little less than the product
# name says for GDDR cards, a little more for HBM ones. Sources: Modal's table of nvidia-smi
# readings (thundergolfer.com/blog/nvidia-gpu-memory-capacity) and nvidia-smi printouts for
# the RTX 4090. A GPU missing here: pass --device-memory with its "Memory Total".
GPU_MEMORY_MIB = {
    "H200-141GB": 143_771,
    "H100-80GB": 81_559,
    "A100-80GB": 81_920,
    "A100-40GB": 40_960,
    "L40S-48GB": 46_068,
    "A10-24GB": 23_028,
    "L4-24GB": 23_034,
    "RTX4090-24GB": 24_564,
    "T4-16GB": 15_360,
}


def parse_size(text: str, option: str = "--device-memory") -> int:
    """`24GiB` -> bytes, by the one rule of model/units.py; a UsageError naming the fix for
    anything else. A number alone is refused here: a memory size without a unit is a typo."""
    if text.strip().replace(".", "", 1).isdigit():
        raise UsageError(f"{option} {text!r}: write a number and a unit, e.g. 24GiB ({SIZE_RULE})")
    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise UsageError(f"{option} {exc}") from None
    if value < SMALLEST:
        raise UsageError(f"{option} {text!r} is less than 1 MiB, which no training step fits in; "
                         f"did you mean {text.strip().rstrip('BbiKk')}GiB?")
    return value


def gpu_memory(name: str) -> tuple[str, int]:
    """`h100-80gb` -> ("H100-80GB", bytes); a UsageError listing the known names otherwise."""
    wanted = name.upper().replace(" ", "").replace("_", "-")
    for known, mib in GPU_MEMORY_MIB.items():
        if wanted in (known, known.replace("-", "")):
            return known, mib * MIB
    raise UsageError(f"--for-gpu {name!r} is not a GPU torchdoctor knows ({', '.join(GPU_MEMORY_MIB)}); "
                     "pass --device-memory with the memory nvidia-smi shows instead, e.g. --device-memory 24564MiB")
