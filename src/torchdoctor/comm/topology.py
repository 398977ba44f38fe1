"""How the GPUs of this host are connected: `nvidia-smi topo -m`, or NVML directly.

`parse_topo_matrix` reads the matrix nvidia-smi prints (its legend: X, NV#, PIX, PXB, PHB,
NODE, SYS; newer drivers underline the headers with ANSI escapes and add NIC columns).
`nvml_topology` asks NVML for the same facts plus what the matrix lacks (PCIe generation
and width, NVLink links up, compute capability). Both are best-effort: on a machine without
a driver they say why and the comm check goes on with what it has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.comm.links import TOPOLOGY_LEVELS
from torchdoctor.machine.nvml import NOT_AVAILABLE, nvml_query, nvml_session

ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
NVIDIA_SMI_TIMEOUT_S = 10.0


@dataclass
class GpuTopology:
    gpus: list[str] = field(default_factory=list)  # "GPU0", "GPU1", ...
    levels: dict[str, str] = field(default_factory=dict)  # "GPU0-GPU1" -> "SYS"
    numa: dict[str, str] = field(default_factory=dict)  # "GPU0" -> "0"
    pcie_generation: int | None = None
    pcie_width: int | None = None
    nvlinks_up: int = 0
    capability: tuple[int, int] | None = None
    source: str = ""  # nvidia-smi | nvml
    note: str = ""

    def level(self, a: int, b: int) -> str | None:
        return self.levels.get(f"GPU{a}-GPU{b}") or self.levels.get(f"GPU{b}-GPU{a}")

    def worst_level(self, gpus: list[int]) -> str | None:
        """The farthest pair among `gpus`: the ring is as slow as its slowest hop."""
        found = [self.level(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
        found = [f for f in found if f]
        return max(found, default=None,
                   key=lambda f: TOPOLOGY_LEVELS.index("NV" if f.startswith("NV") else ("SYS" if f == "SOC" else f)))


def parse_topo_matrix(text: str) -> GpuTopology:
    """The GPU-to-GPU block of `nvidia-smi topo -m`."""
    topo = GpuTopology(source="nvidia-smi")
    lines = [ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = next((line for line in lines if re.match(r"^\s+GPU0\b", line)), None)
    if header is None:
        topo.note = "no GPU matrix in the nvidia-smi output"
        return topo
    columns = header.split("\t") if "\t" in header else re.split(r"\s{2,}|\s(?=GPU\d|NIC\d|mlx)", header.strip())
    columns = [c.strip() for c in columns if c.strip()]
    gpu_columns = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    numa_at = next((i for i, c in enumerate(columns) if c.startswith("NUMA")), None)
    for line in lines[lines.index(header) + 1:]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in (line.split("\t") if "\t" in line else line.split())]
        cells = [c for c in cells if c != ""]
        name = cells[0]
        if not re.fullmatch(r"GPU\d+", name):
            continue
        topo.gpus.append(name)
        values = cells[1:]
        for column, value in zip(gpu_columns, values):
            if _CELL.match(value) and column != name:
                topo.levels[f"{name}-{column}"] = "SYS" if value == "SOC" else value
        if numa_at is not None and len(values) > numa_at:
            topo.numa[name] = values[numa_at]
    return topo


def read_nvidia_smi_topology() -> GpuTopology:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return GpuTopology(note="nvidia-smi not found (no NVIDIA driver on this machine)")
    try:
        done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuTopology(note=f"nvidia-smi topo -m failed: {type(exc).__name__}")
    if done.returncode != 0:
        return GpuTopology(note=f"nvidia-smi topo -m exited {done.returncode}: {done.stderr.strip()[:120]}")
    return parse_topo_matrix(done.stdout)


# NVML_TOPOLOGY_* values (nvml.h) -> the nvidia-smi names for the same levels
NVML_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def nvml_topology(indices: list[int], nvml: Any = None) -> GpuTopology:
    """PCIe generation/width, NVLinks up, compute capability and the common ancestor of each GPU
    pair, through machine/nvml.py (what the driver cannot answer stays unknown)."""
    topo = GpuTopology(source="nvml")
    with nvml_session(nvml) as (module, reason):
        if module is None:
            topo.note = f"NVML not available: {reason}"
            return topo

        def ask(fn_name: str, *args: Any) -> Any:
            value = nvml_query(fn_name, *args, nvml=module)
            return None if value is NOT_AVAILABLE else value

        handles = {i: ask("nvmlDeviceGetHandleByIndex", i) for i in indices}
        if any(h is None for h in handles.values()):
            topo.note = "NVML could not open every GPU of the job"
            return topo
        topo.gpus = [f"GPU{i}" for i in indices]
        first = handles[indices[0]]
        topo.pcie_generation = ask("nvmlDeviceGetMaxPcieLinkGeneration", first)
        topo.pcie_width = ask("nvmlDeviceGetMaxPcieLinkWidth", first)
        topo.capability = ask("nvmlDeviceGetCudaComputeCapability", first)
        for link in range(getattr(module, "NVML_NVLINK_MAX_LINKS", 18)):
            if ask("nvmlDeviceGetNvLinkState", first, link) == 1:
                topo.nvlinks_up += 1
        for i in indices:
            for j in indices:
                if i < j:
                    level = ask("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                    if level is not None:
                        topo.levels[f"GPU{i}-GPU{j}"] = NVML_LEVELS.get(level, str(level))
        if topo.nvlinks_up:
            for key in topo.levels:
                topo.levels[key] = f"NV{topo.nvlinks_up}"
    return topo
