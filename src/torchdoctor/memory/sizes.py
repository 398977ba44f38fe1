"""Memory sizes the user types (`24GiB`, `80GB`) and the GPUs `--for-gpu` knows. Torch-free."""

from __future__ import annotations

import re

from torchdoctor.errors import UsageError

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")
SMALLEST = 2**20  # below a MiB no training step fits: a typo

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
    """`24GiB` -> bytes; a UsageError naming the fix for anything else. K, M, G and T alone
    are binary (as Slurm's --mem=24G); a unit ending in a lowercase b after a capital (Gb)
    is bits, refused rather than guessed."""
    match = _SIZE.match(text)
    if match is None:
        raise UsageError(f"{option} {text!r}: write a number and a unit, e.g. 24GiB or 80GB")
    number, unit = match.group(1), match.group(2)
    if len(unit) >= 2 and unit[-1] == "b" and unit[0].isupper():
        raise UsageError(f"{option} {text!r}: a lowercase b means bits; write {number}{unit[:-1]}B for bytes")
    key = unit.lower()
    key = key + "ib" if key in ("k", "m", "g", "t") else key
    if key not in _UNITS:
        raise UsageError(f"{option} {text!r}: unknown unit {unit!r}; use B, KB, MB, GB, TB (powers of 1000) "
                         "or KiB, MiB, GiB, TiB (powers of 1024), e.g. 24GiB")
    value = int(float(number) * _UNITS[key])
    if value < SMALLEST:
        raise UsageError(f"{option} {text!r} is less than 1 MiB, which no training step fits in; "
                         f"did you mean {number}GiB?")
    return value


def gpu_memory(name: str) -> tuple[str, int]:
    """`h100-80gb` -> ("H100-80GB", bytes); a UsageError listing the known names otherwise."""
    wanted = name.upper().replace(" ", "").replace("_", "-")
    for known, mib in GPU_MEMORY_MIB.items():
        if wanted in (known, known.replace("-", "")):
            return known, mib * 2**20
    raise UsageError(f"--for-gpu {name!r} is not a GPU torchdoctor knows ({', '.join(GPU_MEMORY_MIB)}); "
                     "pass --device-memory with the memory nvidia-smi shows instead, e.g. --device-memory 24564MiB")
