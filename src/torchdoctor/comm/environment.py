"""Settings that cut collective bandwidth: NCCL environment variables and WSL2.

Shared by `torchdoctor comm`, the runtime rule TD607 (the run's environment) and the lint
check (the same variables set in code). Torch-free. What each variable does is from NCCL's
environment-variable documentation (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
"""

from __future__ import annotations

import os
from pathlib import Path

# variable -> (values that cripple, what it does to the path)
CRIPPLING_NCCL_ENV: dict[str, tuple[tuple[str, ...], str]] = {
    "NCCL_P2P_DISABLE": (("1",), "turns off peer-to-peer GPU transfers (PCIe/NVLink); GPUs exchange data "
                                 "through host memory instead"),
    "NCCL_SHM_DISABLE": (("1",), "turns off the shared-memory transport; GPUs in one host without P2P then "
                                 "talk through the network stack (sockets over loopback)"),
    "NCCL_IB_DISABLE": (("1",), "turns off InfiniBand/RoCE; hosts then talk over TCP sockets"),
    "NCCL_P2P_LEVEL": (("LOC", "0"), "allows peer-to-peer transfers only within one GPU (LOC): never between GPUs"),
    "NCCL_NET": (("Socket",), "forces the socket transport between hosts even where InfiniBand exists"),
}


def crippling_settings(env: dict[str, str]) -> dict[str, str]:
    """The NCCL settings in `env` that slow collectives (values as set)."""
    found = {}
    for name, (bad, _) in CRIPPLING_NCCL_ENV.items():
        value = env.get(name)
        if value is not None and value.strip().upper() in {b.upper() for b in bad}:
            found[name] = value
    return found


def what_it_does(name: str) -> str:
    return CRIPPLING_NCCL_ENV[name][1] if name in CRIPPLING_NCCL_ENV else ""


def is_wsl2(proc_version: Path = Path("/proc/version"), environ: dict[str, str] | None = None) -> bool:
    """WSL2 kernels say "microsoft" in /proc/version; WSL sets WSL_DISTRO_NAME / WSL_INTEROP."""
    environ = os.environ if environ is None else environ
    if environ.get("WSL_DISTRO_NAME") or environ.get("WSL_INTEROP"):
        return True
    try:
        return "microsoft" in proc_version.read_text(encoding="utf-8", errors="replace").lower()
    except OSError:
        return False


WSL2_NOTE = ("WSL2: GPUs reach each other through the Windows host's virtualised PCIe; NCCL peer-to-peer is "
             "usually unavailable, so every transfer goes through host memory or sockets. Native Linux on the "
             "same machine typically gives several times the bandwidth.")
