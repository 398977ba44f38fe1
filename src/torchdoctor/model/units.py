"""Byte sizes, in one place: the constants, the one way a size is printed, the one way a size
the user types is read.

One rule for every command: K, M, G and T count in powers of 1024, whether written `24G`,
`24GB` or `24GiB` (as nvidia-smi, nccl-tests, Slurm's `--mem` and a GPU's "80GB" count). A
lowercase `b` after a capital (`24Gb`) means bits and is refused rather than guessed.
"""

from __future__ import annotations

import re

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
SIZE_RULE = "sizes count in powers of 1024: 24G = 24GB = 24GiB; K, M, G, T"
_SCALE = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgGtT]?)(i?[bB])?\s*$")


def format_bytes(n: float) -> str:
    """`1.50 GiB`, `25.0 MiB`, `512.0 KiB`, `100 B`: the one way a size is printed."""
    size = abs(n)
    if size >= GIB:
        return f"{n / GIB:.2f} GiB"
    if size >= MIB:
        return f"{n / MIB:.1f} MiB"
    if size >= KIB:
        return f"{n / KIB:.1f} KiB"
    return f"{n:.0f} B"


def parse_bytes(text: str) -> int:
    """`24GiB`, `24GB`, `24G`, `512K`, `1000` -> bytes (powers of 1024). ValueError saying why."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size; write a number and a unit, e.g. 24GiB, 4M or 512K ({SIZE_RULE})")
    number, prefix, suffix = match.groups()
    if suffix is not None and suffix.endswith("b") and prefix.isupper():
        raise ValueError(f"{text!r}: a lowercase b means bits; write {number}{prefix}B for bytes")
    value = int(float(number) * _SCALE[prefix.lower()])
    if value <= 0:
        raise ValueError(f"{text!r}: a size must be more than 0 bytes")
    return value
